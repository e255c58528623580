build2/cli/cmd_merge_adapters.o: cli/cmd_merge_adapters.c cli/cli.h \
 include/afinar.h
cli/cli.h:
include/afinar.h:
