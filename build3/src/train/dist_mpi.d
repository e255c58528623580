build3/src/train/dist_mpi.o: src/train/dist_mpi.c src/train/dist.h \
 include/afinar.h src/core/core.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h
src/train/dist.h:
include/afinar.h:
src/core/core.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
