build2/cli/train_opts.o: cli/train_opts.c cli/train_opts.h \
 include/afinar.h cli/cli.h
cli/train_opts.h:
include/afinar.h:
cli/cli.h:
