build2/cli/cmd_generate.o: cli/cmd_generate.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
