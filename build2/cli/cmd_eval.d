build2/cli/cmd_eval.o: cli/cmd_eval.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
