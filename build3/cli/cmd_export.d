build3/cli/cmd_export.o: cli/cmd_export.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
