build2/cli/afinar.o: cli/afinar.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
