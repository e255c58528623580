build2/cli/cmd_merge.o: cli/cmd_merge.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
