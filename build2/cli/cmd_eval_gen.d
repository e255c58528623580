build2/cli/cmd_eval_gen.o: cli/cmd_eval_gen.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
