// The syscall filter every sandbox command runs under (see seccomp.c for the policy).
#ifndef SBX_SECCOMP_H
#define SBX_SECCOMP_H

// Installs the filter on the calling thread (sets no_new_privs first, which the filter needs
// and the helper has already set). The filter is inherited by every child and survives execve,
// so it is called once, in the forked command, just before it execs. Returns 0, or -1 with
// errno set; the caller must then not exec the command.
int sbx_seccomp_apply(void);

#endif
