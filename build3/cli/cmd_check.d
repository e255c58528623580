build3/cli/cmd_check.o: cli/cmd_check.c cli/cli.h include/afinar.h \
 cli/train_opts.h
cli/cli.h:
include/afinar.h:
cli/train_opts.h:
