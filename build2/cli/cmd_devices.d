build2/cli/cmd_devices.o: cli/cmd_devices.c cli/cli.h include/afinar.h
cli/cli.h:
include/afinar.h:
