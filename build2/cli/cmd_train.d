build2/cli/cmd_train.o: cli/cmd_train.c cli/cli.h include/afinar.h \
 cli/train_opts.h
cli/cli.h:
include/afinar.h:
cli/train_opts.h:
