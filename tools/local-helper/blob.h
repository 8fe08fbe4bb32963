// sbx-helper blob push|pull: a snapshot layer moved between the pod and the registry (blob.c).
#ifndef SBX_BLOB_H
#define SBX_BLOB_H

int sbx_blob_main(int argc, char **argv);

#endif
