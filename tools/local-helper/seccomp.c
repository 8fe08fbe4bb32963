// The syscall filter of a local sandbox: a classic BPF program built here, without libseccomp,
// so the statically linked helper still needs nothing beyond gcc and libc6-dev.
//
// Policy: an allowlist, like the container runtimes' default profile, so a syscall added to a
// later kernel is denied until someone decides it is safe. Three answers besides "allow":
//   EPERM   a syscall we deny on purpose (the kernel surfaces behind most container escapes,
//           or operations that need capabilities the sandbox never has); the table says why.
//   ENOSYS  a syscall this table does not know (newer than it, obsolete, or unimplemented), and
//           clone3, whose flags live in memory a filter cannot read: libc then falls back to
//           clone, whose flags are checked here. ENOSYS is what libc treats as "not there".
//   kill    any other ABI than native x86_64 (i386 through int 0x80, x32): its numbers mean
//           other syscalls, so answering with an errno would be a guess.
// Compared with the default profile this also denies io_uring (recent versions of it no longer
// allow it either), name_to_handle_at and modify_ldt, and lets ptrace and process_vm_* through
// as it does on kernels >= 4.8: they only reach the tenant's own processes, since the helper and
// its relays are non-dumpable.
//
// The program is a binary search over syscall-number ranges (253 instructions, 11 to 19 run per
// call); the kernel (>= 5.11) also caches "always allowed" numbers and skips the filter for them.
#define _GNU_SOURCE
#include "seccomp.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(__x86_64__)
// The tables below are x86_64's numbers (legacy calls included). Another architecture needs
// its own audit arch and its own legacy set; until then the helper refuses to build rather
// than run sandboxes without a filter.
#error "sbx-helper's seccomp filter is written for x86_64 only"
#endif
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "argument checks load the low 32 bits of an argument at its first byte"
#endif

// Syscalls newer than the C library's headers (Debian 12 has those of Linux 6.1). From 424
// on, numbers are the same on every architecture.
#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef SYS_map_shadow_stack
#define SYS_map_shadow_stack 453
#endif
#ifndef SYS_futex_wake
#define SYS_futex_wake 454
#define SYS_futex_wait 455
#define SYS_futex_requeue 456
#endif
#ifndef SYS_statmount
#define SYS_statmount 457
#define SYS_listmount 458
#endif
#ifndef SYS_lsm_get_self_attr
#define SYS_lsm_get_self_attr 459
#define SYS_lsm_set_self_attr 460
#define SYS_lsm_list_modules 461
#endif
#ifndef SYS_mseal
#define SYS_mseal 462
#endif
#ifndef SYS_setxattrat
#define SYS_setxattrat 463
#define SYS_getxattrat 464
#define SYS_listxattrat 465
#define SYS_removexattrat 466
#endif
#ifndef SYS_open_tree_attr
#define SYS_open_tree_attr 467
#endif
#ifndef SYS_uretprobe
#define SYS_uretprobe 335 /* x86_64 only */
#endif

enum verdict { UNKNOWN = 0, ALLOW, EPERM_, CHECK_CLONE, CHECK_PERSONALITY, CHECK_SOCKET };

struct rule {
  int nr;
  unsigned char verdict;
};

#define A(name) {SYS_##name, ALLOW}
#define D(name) {SYS_##name, EPERM_}

static const struct rule RULES[] = {
    // files, directories, attributes
    A(read), A(write), A(open), A(close), A(stat), A(fstat), A(lstat), A(lseek), A(pread64), A(pwrite64), A(readv),
    A(writev), A(preadv), A(pwritev), A(preadv2), A(pwritev2), A(access), A(faccessat), A(faccessat2), A(openat),
    A(openat2), A(creat), A(newfstatat), A(statx), A(statfs), A(fstatfs), A(truncate), A(ftruncate), A(fallocate),
    A(fsync), A(fdatasync), A(sync), A(syncfs), A(sync_file_range), A(readahead), A(fadvise64), A(flock), A(fcntl),
    A(ioctl), A(pipe), A(pipe2), A(dup), A(dup2), A(dup3), A(close_range), A(getdents), A(getdents64), A(getcwd),
    A(chdir), A(fchdir),
    A(rename), A(renameat), A(renameat2), A(mkdir), A(mkdirat), A(rmdir), A(link), A(linkat), A(unlink), A(unlinkat),
    A(symlink), A(symlinkat), A(readlink), A(readlinkat), A(mknod), A(mknodat), A(chmod), A(fchmod), A(fchmodat),
    A(fchmodat2), A(chown), A(fchown), A(lchown), A(fchownat), A(umask), A(utime), A(utimes), A(futimesat),
    A(utimensat), A(setxattr), A(lsetxattr), A(fsetxattr), A(getxattr), A(lgetxattr), A(fgetxattr), A(listxattr),
    A(llistxattr), A(flistxattr), A(removexattr), A(lremovexattr), A(fremovexattr), A(setxattrat), A(getxattrat),
    A(listxattrat), A(removexattrat), A(copy_file_range), A(sendfile), A(splice), A(tee), A(vmsplice),
    A(cachestat), A(statmount), A(listmount),
    // waiting on files, events, timers
    A(poll), A(ppoll), A(select), A(pselect6), A(epoll_create), A(epoll_create1), A(epoll_ctl), A(epoll_wait),
    A(epoll_pwait), A(epoll_pwait2), A(eventfd), A(eventfd2), A(signalfd), A(signalfd4), A(timerfd_create),
    A(timerfd_settime), A(timerfd_gettime), A(inotify_init), A(inotify_init1), A(inotify_add_watch),
    A(inotify_rm_watch), A(fanotify_mark), A(io_setup), A(io_destroy), A(io_getevents), A(io_pgetevents),
    A(io_submit), A(io_cancel),
    // memory
    A(brk), A(mmap), A(mprotect), A(munmap), A(mremap), A(msync), A(mincore), A(madvise), A(mlock), A(mlock2),
    A(munlock), A(mlockall), A(munlockall), A(remap_file_pages), A(membarrier), A(memfd_create), A(memfd_secret),
    A(pkey_mprotect), A(pkey_alloc), A(pkey_free), A(mseal), A(map_shadow_stack),
    // processes, threads, identity (without capabilities only the sandbox's own ids can be set)
    A(fork), A(vfork), A(execve), A(execveat), A(exit), A(exit_group), A(wait4), A(waitid), A(getpid), A(getppid),
    A(gettid), A(getpgid), A(setpgid), A(getpgrp), A(getsid), A(setsid), A(getuid), A(geteuid), A(getgid),
    A(getegid), A(setuid), A(setgid), A(setreuid), A(setregid), A(setresuid), A(getresuid), A(setresgid),
    A(getresgid), A(setfsuid), A(setfsgid), A(getgroups), A(setgroups), A(capget), A(capset), A(prctl),
    A(arch_prctl), A(set_tid_address), A(set_robust_list), A(get_robust_list), A(rseq), A(futex), A(futex_waitv),
    A(futex_wake), A(futex_wait), A(futex_requeue), A(set_thread_area), A(get_thread_area), A(getrlimit),
    A(setrlimit), A(prlimit64), A(getrusage), A(getpriority), A(setpriority), A(sched_yield), A(sched_setparam),
    A(sched_getparam), A(sched_setscheduler), A(sched_getscheduler), A(sched_get_priority_max),
    A(sched_get_priority_min), A(sched_rr_get_interval), A(sched_setaffinity), A(sched_getaffinity),
    A(sched_setattr), A(sched_getattr), A(getcpu), A(ioprio_set), A(ioprio_get), A(seccomp),
    A(landlock_create_ruleset), A(landlock_add_rule), A(landlock_restrict_self), A(pidfd_open),
    A(pidfd_send_signal), A(process_mrelease), A(restart_syscall), A(uretprobe),
    // debugging the tenant's own processes (non-dumpable helper and relays stay out of reach)
    A(ptrace), A(process_vm_readv), A(process_vm_writev),
    // signals
    A(rt_sigaction), A(rt_sigprocmask), A(rt_sigreturn), A(rt_sigpending), A(rt_sigtimedwait), A(rt_sigqueueinfo),
    A(rt_tgsigqueueinfo), A(rt_sigsuspend), A(sigaltstack), A(kill), A(tkill), A(tgkill), A(pause),
    // time (reading; adjtimex and clock_adjtime change nothing without CAP_SYS_TIME)
    A(nanosleep), A(clock_nanosleep), A(clock_gettime), A(clock_getres), A(gettimeofday), A(time), A(times),
    A(adjtimex), A(clock_adjtime), A(alarm), A(getitimer), A(setitimer), A(timer_create), A(timer_settime),
    A(timer_gettime), A(timer_getoverrun), A(timer_delete), A(uname), A(sysinfo), A(getrandom),
    // sockets (the network namespace has only loopback) and System V / POSIX IPC (own ipc namespace)
    A(socketpair), A(connect), A(accept), A(accept4), A(bind), A(listen), A(shutdown), A(sendto), A(recvfrom),
    A(sendmsg), A(recvmsg), A(sendmmsg), A(recvmmsg), A(getsockname), A(getpeername), A(setsockopt),
    A(getsockopt), A(shmget), A(shmat), A(shmctl), A(shmdt), A(semget), A(semop), A(semtimedop), A(semctl),
    A(msgget), A(msgsnd), A(msgrcv), A(msgctl), A(mq_open), A(mq_unlink), A(mq_timedsend), A(mq_timedreceive),
    A(mq_notify), A(mq_getsetattr),
    // allowed with argument checks (see emit_checks)
    {SYS_clone, CHECK_CLONE}, {SYS_personality, CHECK_PERSONALITY}, {SYS_socket, CHECK_SOCKET},

    // ---- denied with EPERM ----
    // namespaces: a user namespace hands the tenant a full capability set over new kernel
    // objects (mounts, netfilter, ...), the usual first step of a kernel exploit
    D(unshare), D(setns),
    // mounts and the root directory
    D(mount), D(umount2), D(pivot_root), D(chroot), D(fsopen), D(fsconfig), D(fsmount), D(fspick), D(move_mount),
    D(open_tree), D(open_tree_attr), D(mount_setattr),
    // io_uring: a second syscall interface with its own long list of privilege escalations
    D(io_uring_setup), D(io_uring_enter), D(io_uring_register),
    // the kernel keyring is not namespaced
    D(add_key), D(request_key), D(keyctl),
    // program loading, tracing and profiling of the kernel, fault handling that widens races
    D(bpf), D(perf_event_open), D(userfaultfd), D(fanotify_init), D(lookup_dcookie), D(syslog),
    // other processes' files and memory layout (the default profile wants CAP_SYS_PTRACE)
    D(kcmp), D(pidfd_getfd), D(process_madvise),
    // file handles bypass path permissions (the "shocker" breakout)
    D(open_by_handle_at), D(name_to_handle_at),
    // the machine: modules, kexec, reboot, swap, accounting, quotas, clock, I/O ports, LSM state
    D(init_module), D(finit_module), D(delete_module), D(kexec_load), D(kexec_file_load), D(reboot), D(swapon),
    D(swapoff), D(acct), D(quotactl), D(quotactl_fd), D(settimeofday), D(clock_settime), D(iopl), D(ioperm),
    D(vhangup), D(sethostname), D(setdomainname), D(lsm_get_self_attr), D(lsm_set_self_attr),
    D(lsm_list_modules), D(modify_ldt),
    // NUMA placement is host policy
    D(mbind), D(set_mempolicy), D(get_mempolicy), D(migrate_pages), D(move_pages), D(set_mempolicy_home_node),
};

// Highest syscall number the program distinguishes; every number from here on is unknown.
#define NR_LIMIT 512
#define MAX_INSNS 1024
#define CLONE_NS_FLAGS \
  (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)
// x86's __X32_SYSCALL_BIT: a syscall number with it set uses the x32 ABI
#define X32_BIT 0x40000000u
#define AF_ALG_ 38
#define AF_VSOCK_ 40
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

struct program {
  struct sock_filter insns[MAX_INSNS];
  unsigned n;
  int overflow;
  // positions of "jump to the check block" placeholders, patched once the blocks are placed
  unsigned fixups[64];
  unsigned char fixup_kind[64];
  unsigned n_fixups;
};

struct range {
  unsigned lo; /* first syscall number of the range; it ends where the next begins */
  unsigned char verdict;
};

static unsigned emit(struct program *p, struct sock_filter f) {
  if (p->n >= MAX_INSNS) {
    p->overflow = 1;
    return p->n;
  }
  p->insns[p->n] = f;
  return p->n++;
}

static void emit_ret(struct program *p, uint32_t action) {
  emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
}

// A leaf of the search: the range's verdict, or a jump to the block that checks arguments.
// Jumps use BPF_JA, whose 32-bit offset reaches anywhere (conditional jumps reach 255).
static void emit_leaf(struct program *p, unsigned char verdict) {
  switch (verdict) {
  case ALLOW: emit_ret(p, SECCOMP_RET_ALLOW); return;
  case EPERM_: emit_ret(p, RET_ERRNO(EPERM)); return;
  case UNKNOWN: emit_ret(p, RET_ERRNO(ENOSYS)); return;
  default:
    if (p->n_fixups >= sizeof p->fixups / sizeof p->fixups[0]) {
      p->overflow = 1;
      return;
    }
    p->fixup_kind[p->n_fixups] = verdict;
    p->fixups[p->n_fixups++] = emit(p, (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 0));
  }
}

// Binary search over ranges[lo, hi): "nr >= start of the middle range" goes right.
static void emit_search(struct program *p, const struct range *r, unsigned lo, unsigned hi) {
  if (hi - lo == 1) {
    emit_leaf(p, r[lo].verdict);
    return;
  }
  unsigned mid = lo + (hi - lo) / 2;
  emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, r[mid].lo, 0, 1));
  unsigned to_right = emit(p, (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 0));
  emit_search(p, r, lo, mid);
  if (!p->overflow) p->insns[to_right].k = p->n - (to_right + 1);
  emit_search(p, r, mid, hi);
}

static void load_arg0_low(struct program *p) {
  emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])));
}

// Emits the argument check for one kind and returns where it starts.
static unsigned emit_check(struct program *p, unsigned char kind) {
  unsigned start = p->n;
  load_arg0_low(p); /* clone's flags, the persona, the socket's domain: all 32-bit in the kernel */
  if (kind == CHECK_CLONE) {
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NS_FLAGS, 0, 1));
    emit_ret(p, RET_ERRNO(EPERM));
    emit_ret(p, SECCOMP_RET_ALLOW);
  } else if (kind == CHECK_PERSONALITY) {
    // the personas libc and setarch use (PER_LINUX, PER_LINUX32, UNAME26, query); others, such
    // as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, weaken the process or reach little-tested code
    static const uint32_t ok[] = {0x0, 0x0008, 0x20000, 0x20008, 0xffffffffu};
    for (unsigned i = 0; i < sizeof ok / sizeof ok[0]; i++) {
      emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ok[i], 0, 1));
      emit_ret(p, SECCOMP_RET_ALLOW);
    }
    emit_ret(p, RET_ERRNO(EPERM));
  } else {
    // AF_ALG: the kernel's crypto API, a source of bugs; AF_VSOCK: reaches the host and VMs
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_ALG_, 1, 0));
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_VSOCK_, 0, 1));
    emit_ret(p, RET_ERRNO(EPERM));
    emit_ret(p, SECCOMP_RET_ALLOW);
  }
  return start;
}

// Collapses the rules into consecutive ranges of one verdict. Returns their count, or 0 when
// two rules disagree about one number (a mistake in the table: every exec then fails, which beats
// running commands under a filter nobody meant).
static unsigned build_ranges(struct range *out, unsigned max) {
  static unsigned char by_nr[NR_LIMIT];
  memset(by_nr, UNKNOWN, sizeof by_nr);
  for (unsigned i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
    const struct rule *r = &RULES[i];
    if (r->nr < 0 || r->nr >= NR_LIMIT || (by_nr[r->nr] != UNKNOWN && by_nr[r->nr] != r->verdict)) return 0;
    by_nr[r->nr] = r->verdict;
  }
  unsigned n = 0;
  for (unsigned nr = 0; nr < NR_LIMIT; nr++) {
    if (n > 0 && out[n - 1].verdict == by_nr[nr]) continue;
    if (n == max) return 0;
    out[n++] = (struct range){nr, by_nr[nr]};
  }
  if (out[n - 1].verdict != UNKNOWN) {
    if (n == max) return 0;
    out[n++] = (struct range){NR_LIMIT, UNKNOWN};
  }
  return n;
}

static int build_program(struct program *p) {
  static struct range ranges[NR_LIMIT + 1];
  unsigned n_ranges = build_ranges(ranges, NR_LIMIT + 1);
  if (n_ranges == 0) return -1;
  memset(p, 0, sizeof *p);
  emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  emit_ret(p, SECCOMP_RET_KILL_PROCESS);
  emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
  emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
  emit_ret(p, SECCOMP_RET_KILL_PROCESS);
  emit_search(p, ranges, 0, n_ranges);
  unsigned block[CHECK_SOCKET + 1];
  for (unsigned char kind = CHECK_CLONE; kind <= CHECK_SOCKET; kind++) block[kind] = emit_check(p, kind);
  if (p->overflow) return -1;
  for (unsigned i = 0; i < p->n_fixups; i++) p->insns[p->fixups[i]].k = block[p->fixup_kind[i]] - (p->fixups[i] + 1);
  return 0;
}

int sbx_seccomp_apply(void) {
  static struct program p;
  if (build_program(&p) < 0) {
    errno = EINVAL;
    return -1;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return -1;
  struct sock_fprog fprog = {.len = (unsigned short)p.n, .filter = p.insns};
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog);
}
