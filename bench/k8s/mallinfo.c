// An LD_PRELOAD probe for bench/k8s/channel-memory.ts: glibc's allocator statistics (mallinfo2,
// all arenas) written to $MALLINFO_FILE every 100 ms, so the benchmark can tell native memory in
// use from memory the allocator freed but keeps (what RSS cannot tell apart). Not part of sbx.
//   gcc -O2 -shared -fPIC -o /tmp/mallinfo.so bench/k8s/mallinfo.c -lpthread
//   LD_PRELOAD=/tmp/mallinfo.so MALLINFO_FILE=/tmp/mallinfo.txt node ... bench/k8s/channel-memory.ts
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *sample(void *arg) {
  const char *path = arg;
  char line[160], tmp[4096];
  // written aside and renamed over: a reader never sees a half-written line
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  for (;;) {
    struct mallinfo2 m = mallinfo2();
    // arena (brk heap), mmapped chunks, in use, free (kept), releasable at the top
    int n = snprintf(line, sizeof line, "%zu %zu %zu %zu %zu\n", m.arena, m.hblkhd, m.uordblks, m.fordblks,
                     m.keepcost);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      int ok = write(fd, line, (size_t)n) == n;
      close(fd);
      if (ok) rename(tmp, path); // else the next sample tries again
    }
    usleep(100000);
  }
  return NULL;
}

__attribute__((constructor)) static void start(void) {
  const char *path = getenv("MALLINFO_FILE");
  if (!path) return;
  unsetenv("LD_PRELOAD"); // not into the processes node starts
  pthread_t t;
  if (pthread_create(&t, NULL, sample, (void *)path) == 0) pthread_detach(t);
}
