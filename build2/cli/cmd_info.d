build2/cli/cmd_info.o: cli/cmd_info.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
