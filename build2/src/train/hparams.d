build2/src/train/hparams.o: src/train/hparams.c src/train/hparams.h \
 src/train/data.h src/formats/jsonl.h src/core/core.h include/afinar.h
src/train/hparams.h:
src/train/data.h:
src/formats/jsonl.h:
src/core/core.h:
include/afinar.h:
