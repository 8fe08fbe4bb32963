// The daemon's process registry (registry.c): one entry per command, addressed by the id the
// replica gave it, kept after the command ends until its exit was read (or it expired).
#ifndef SBX_REGISTRY_H
#define SBX_REGISTRY_H
#include <stdint.h>
#include <sys/types.h>

#include "channel.h"

#define ID_MAX 64
/** a start's last env entry with this prefix is its label, not a variable (daemon.c 'S') */
#define LABEL_ENV "=sbx-label="
/** a start's field after its env asks for a pty: "pty=COLS ROWS" (daemon.c 'S') */
#define PTY_FIELD "pty="
/** longer labels are not kept: the list reply must stay one frame */
#define LABEL_MAX 8192

struct command {
  char id[ID_MAX + 1];
  pid_t pid;           /* leads its own session and process group */
  int in_fd;           /* the command's stdin pipe, -1 once closed */
  int out_fd[2];       /* stdout, stderr pipes; -1 at their end */
  struct ch_ring out[2];
  char *inq;           /* stdin received and not yet in the pipe */
  size_t inq_len, inq_cap;
  int in_eof;          /* close stdin once inq is written */
  int exited, status;  /* wait status once exited */
  int timed_out, killed;
  double deadline;     /* monotonic ms, 0: none */
  double expires;      /* monotonic ms after which a finished entry goes, 0: not finished */
  int exit_sent;
  // the reader, if one is attached: connection index, its stream id, credit and position
  int conn;
  uint32_t stream;
  int64_t credit;
  uint64_t sent[2];
  uint32_t in_credit;  /* stdin bytes written to the pipe and not yet granted back */
  // a tunnel (reg_tunnel): in_fd and out_fd[0] are one TCP socket; 4 or 6 (its family), 0: a command
  int tunnel;
  int connecting;      /* the connect has not completed: poll in_fd for POLLOUT, move no bytes */
  int port;
  char *label;         /* the replica's opaque label for the command ('S'), returned by 'L'; NULL: none */
  int pty;             /* a pty's main side, kept for its window and its foreground job; -1: pipes */
  double quiet_from;   /* a pty's: monotonic ms of its exit, then of each output read after it */
  double drain_until;  /* a pty's: its output is taken as ended by then, written or not (daemon.c settle) */
};

struct winsize;

/** starts argv with env pairs added to the daemon's own, in cwd; stderr gets the reason if it cannot */
struct command *reg_start(const char *id, const char *cwd, double timeout_ms, char **argv, char **env,
                          const struct winsize *pty);
/** a pty's window ('Z'); nothing for a command on pipes */
void reg_resize(struct command *c, const struct winsize *ws);
struct command *reg_find(const char *id);
struct command *reg_by_stream(int conn, uint32_t stream);
/**
 * signals the command's group (a pty's: the terminal's foreground job, what ^C reaches);
 * SIGKILL also sweeps every process carrying its SBX_EXEC_ID
 */
void reg_signal(struct command *c, int sig);
/** reaps children; marks commands exited */
void reg_reap(void);
/** frees entries whose time is up */
void reg_expire(double now);
/**
 * A tunnel: a TCP connection to `port` on the pod's own loopback (127.0.0.1, then ::1 when
 * refused), connecting without blocking; NULL with errno when it cannot even start
 */
struct command *reg_tunnel(const char *id, long port);
/** after POLLOUT on a connecting tunnel: 0 connected, else the errno it failed with (a refused v4 tries ::1) */
int reg_tunnel_settle(struct command *c);
/** the 'l' reply (one line per command, daemon.c 'L'), malloc'd; at most CH_MAX_FRAME bytes */
char *reg_list(size_t *len);
/** the exit as the replica reads it: exit:N, signal:N, timeout:N or killed:N */
int reg_exit_text(const struct command *c, char *buf, size_t len);

extern struct command **reg_all;
extern int reg_count;

#endif
