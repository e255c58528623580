build2/src/lora/svd.o: src/lora/svd.c src/lora/svd.h src/core/core.h \
 include/afinar.h
src/lora/svd.h:
src/core/core.h:
include/afinar.h:
