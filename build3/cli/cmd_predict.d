build3/cli/cmd_predict.o: cli/cmd_predict.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
