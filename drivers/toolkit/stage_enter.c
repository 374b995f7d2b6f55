/*
 * rtax-enter: run one command inside a live stage sandbox, with exactly the
 * restrictions the sandbox's own processes have (the stage driver's exec channel).
 *
 *   rtax-enter PID:STARTTIME FILTER DIR [CGROUP_PROCS...] -- ARGV...
 *
 * PID is the sandbox's init as the host sees it (bubblewrap's child-pid), STARTTIME
 * its start time (see below), FILTER
 * a file holding the seccomp program (struct sock_filter[]), DIR the working
 * directory inside the sandbox, CGROUP_PROCS the `cgroup.procs` files of the
 * environment's cgroup(s), which it joins first (so the caller spawns it without a
 * pre-exec hook: Python can then vfork). Run as root on the host.
 *
 * Why not nsenter: nsenter leaves the command with every capability of the
 * sandbox's user namespace and without the seccomp filter, so the exec channel
 * would keep out less than the shell channel. Here the order is:
 *   0. join the environment's cgroups (every descendant stays in them);
 *   1. open the sandbox's namespaces, root and the filter (as host root);
 *   2. drop supplementary groups; enter ipc, uts, net, cgroup, pid and mount
 *      namespaces and the sandbox's root (still host root: these namespaces may
 *      belong to an outer user namespace of the sandbox);
 *   3. enter the user namespace last, become its uid/gid 0 (an unprivileged uid
 *      on the host), drop every capability (bounding, ambient, permitted),
 *      set no_new_privs and load the filter;
 *   4. fork (a pid namespace applies to children), exec the command, and exit
 *      with its status (128 + signal when it was killed, like a shell).
 * Exit 124: the sandbox is gone; 125: bad usage; 126: the sandbox could not be entered;
 * 127: no such command.
 *
 * The same binary also starts the sandbox itself:
 *
 *   rtax-enter --spawn UID FILTER INFO [CGROUP_PROCS...] -- BWRAP ARGS...
 *
 * joins the environment's cgroups, opens FILTER (as host root) on descriptor 5 for
 * bubblewrap's --seccomp 5, makes descriptor 3 a copy of stdout when INFO is 1 (for
 * bubblewrap's --info-fd 3: the sandbox's pid comes back on stdout), drops every
 * supplementary group and becomes UID (uid and gid) before exec'ing bubblewrap. Doing
 * this here rather than in a Python pre-exec hook lets the caller spawn with vfork (a
 * fork of the Python process cost about 4 ms a sandbox), needs no descriptor passed
 * (so an SSH host starts a sandbox with the same command as the controller), and no
 * setpriv.
 *
 * And it is the sandbox's init (pid 1 of its pid namespace, bubblewrap's --as-pid-1):
 *
 *   rtax-enter --init exec             say READY, reap orphans, exit when stdin closes
 *   rtax-enter --init shell SHELL      say READY, run SHELL as its child on the same
 *                                      stdin/stdout, reap orphans, exit with its status
 *   rtax-enter --init hold             reap orphans until killed (a container's init:
 *                                      docker's and podman's exec channel, where the
 *                                      engine, not a pipe, says when the container ends)
 *
 * The init is the one process every later step shares, so a step must not be able to
 * change it: it is not dumpable (its file is execute-only inside the sandbox, and it
 * says so itself with PR_SET_DUMPABLE), so /proc/1/mem, process_vm_writev and
 * pidfd_getfd are refused to the sandbox's processes, which have no CAP_SYS_PTRACE (a
 * container's root has the same uid and capabilities as its init: only the dumpable
 * flag keeps it out); as pid
 * 1 of its namespace it takes no signal from inside that it does not handle (it
 * handles none), so `kill -9 1` is a no-op. It keeps no descriptor of the channel in
 * the shell mode: the shell alone holds stdin and stdout.
 *
 * The exec channel names the sandbox by PID:STARTTIME (the init's start time, field 22
 * of /proc/PID/stat, in clock ticks since boot): every namespace and the root are
 * opened beneath one descriptor of /proc/PID, after the start time read through that
 * same descriptor matched, so a PID that was reused by another process (another
 * sandbox's init) is never entered: such an action fails with status 124 ("the
 * sandbox is gone").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

static void fail(const char *what, const char *arg) {
  fprintf(stderr, "rtax-enter: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
          strerror(errno));
  exit(126);
}

/* Exit status of an action whose sandbox is gone (its init died, or the PID is
   another process now). */
#define GONE 124

static void gone(const char *why) {
  fprintf(stderr, "rtax-enter: the sandbox is gone: %s\n", why);
  exit(GONE);
}

static int open_ns(int procfd, const char *name, int optional) {
  char path[64];
  snprintf(path, sizeof path, "ns/%s", name);
  int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && !(optional && errno == ENOENT)) {
    if (errno == ESRCH || errno == ENOENT) gone("its init exited");
    fail("cannot open", path);
  }
  return fd;
}

/* Field 22 of /proc/PID/stat (start time), read beneath the descriptor of /proc/PID. */
static unsigned long long start_time(int procfd) {
  char buf[1024];
  int fd = openat(procfd, "stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) gone("its init exited");
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) gone("its init exited");
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (p == NULL) gone("unreadable stat");
  /* after ") " come fields 3.. : state is field 3, start time field 22 */
  int field = 2;
  for (p++; *p && field < 22; p++) {
    if (*p == ' ') field++;
  }
  return strtoull(p, NULL, 10);
}

static int join_cgroups(char **files, int n_files) {
  char self[32];
  int n = snprintf(self, sizeof self, "%d", (int)getpid());
  for (int i = 0; i < n_files; i++) {
    int cfd = open(files[i], O_WRONLY | O_CLOEXEC);
    if (cfd < 0 || write(cfd, self, (size_t)n) != n) fail("cannot join cgroup", files[i]);
    close(cfd);
  }
  return 0;
}

static int spawn_mode(int argc, char **argv) {
  int sep = 5;
  while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
  char *end = NULL;
  unsigned long uid = argc > 2 ? strtoul(argv[2], &end, 10) : 0;
  if (argc < 7 || sep >= argc - 1 || end == argv[2] || *end != '\0' || uid == 0 ||
      uid > 4294967294UL || (strcmp(argv[4], "0") != 0 && strcmp(argv[4], "1") != 0)) {
    fprintf(stderr, "usage: rtax-enter --spawn UID FILTER INFO(0|1) [CGROUP_PROCS...] -- ARGV...\n");
    return 125;
  }
  join_cgroups(argv + 5, sep - 5);
  int ffd = open(argv[3], O_RDONLY);
  if (ffd < 0) fail("cannot open filter", argv[3]);
  if (ffd != 5) {
    if (dup2(ffd, 5) != 5) fail("dup2", argv[3]);
    close(ffd);
  }
  if (strcmp(argv[4], "1") == 0 && dup2(1, 3) != 3) fail("dup2", "stdout");
  if (setgroups(0, NULL) != 0) fail("setgroups", NULL);
  if (setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) != 0) fail("setresgid", NULL);
  if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) fail("setresuid", NULL);
  execvp(argv[sep + 1], argv + sep + 1);
  int e = errno;
  fprintf(stderr, "rtax-enter: cannot run %s: %s\n", argv[sep + 1], strerror(e));
  return e == ENOENT ? 127 : 126;
}

/* Close every descriptor from `lowest` up (close_range where the kernel has it). */
static void close_from(int lowest) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0) return;
#endif
  for (int fd = lowest; fd < 1024; fd++) close(fd);
}

static int init_mode(int argc, char **argv) {
  int shell = argc >= 4 && strcmp(argv[2], "shell") == 0;
  int hold = argc == 3 && strcmp(argv[2], "hold") == 0;
  if (!shell && !hold && !(argc == 3 && strcmp(argv[2], "exec") == 0)) {
    fprintf(stderr, "usage: rtax-enter --init exec | --init shell SHELL | --init hold\n");
    return 125;
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("prctl", "PR_SET_DUMPABLE");
  close_from(3);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0) fail("sigprocmask", NULL);
  static const char ready[] = "RTAX-READY\n";  /* the sandbox is set up */
  if (!hold && write(1, ready, sizeof ready - 1) != (ssize_t)(sizeof ready - 1))
    fail("write", NULL);
  pid_t sh = -1;
  if (shell) {
    sh = fork();
    if (sh < 0) fail("fork", NULL);
    if (sh == 0) {
      sigprocmask(SIG_UNBLOCK, &chld, NULL);
      execv(argv[3], argv + 3);
      fprintf(stderr, "rtax-enter: cannot run %s: %s\n", argv[3], strerror(errno));
      _exit(127);
    }
    /* the shell alone holds the channel */
    int null = open("/dev/null", O_RDWR);
    if (null < 0) fail("open", "/dev/null");
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    if (null > 2) close(null);
  }
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC);
  if (sfd < 0) fail("signalfd", NULL);
  struct pollfd fds[2] = {{.fd = sfd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
  for (;;) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      if (p == sh) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (poll(fds, shell || hold ? 1 : 2, -1) < 0 && errno != EINTR) fail("poll", NULL);
    if (fds[0].revents) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) < 0 && errno != EAGAIN && errno != EINTR) fail("read", NULL);
    }
    if (!shell && !hold && fds[1].revents) {
      char buf[256];
      ssize_t n = read(0, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return 0; /* stdin closed */
    }
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--init") == 0) return init_mode(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--spawn") == 0) return spawn_mode(argc, argv);
  int sep = 4;
  while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
  char *colon = argc > 1 ? strchr(argv[1], ':') : NULL;
  if (argc < 5 || sep >= argc - 1 || colon == NULL || colon == argv[1] ||
      strspn(argv[1], "0123456789") != (size_t)(colon - argv[1]) || colon[1] == '\0' ||
      strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
    fprintf(stderr, "usage: rtax-enter PID:STARTTIME FILTER DIR [CGROUP_PROCS...] -- ARGV...\n");
    return 125;
  }
  *colon = '\0';
  const char *pid = argv[1];
  unsigned long long want_start = strtoull(colon + 1, NULL, 10);
  const char *dir = argv[3];
  char **cmd = argv + sep + 1;

  /* 0. the environment's cgroups, before anything else runs */
  join_cgroups(argv + 4, sep - 4);

  /* 1. the filter, the namespaces and the root, opened as host root */
  static struct sock_filter insns[BPF_MAXINSNS];
  int ffd = open(argv[2], O_RDONLY | O_CLOEXEC);
  if (ffd < 0) fail("cannot open filter", argv[2]);
  ssize_t len = read(ffd, insns, sizeof insns);
  if (len <= 0 || len % (ssize_t)sizeof insns[0] != 0) {
    errno = EINVAL;
    fail("bad filter", argv[2]);
  }
  close(ffd);
  struct sock_fprog prog = {.len = (unsigned short)(len / sizeof insns[0]), .filter = insns};

  char procpath[64];
  snprintf(procpath, sizeof procpath, "/proc/%s", pid);
  int procfd = open(procpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (procfd < 0) gone("its init exited");
  /* the descriptor names one process for good: if it is not the init we were given
     (the PID was reused), stop; if that init dies later, every open beneath fails */
  if (start_time(procfd) != want_start) gone("its PID belongs to another process now");
  static const char *const names[] = {"ipc", "uts", "net", "cgroup", "pid", "mnt"};
  int fds[6];
  for (int i = 0; i < 6; i++) fds[i] = open_ns(procfd, names[i], i == 3);
  int userfd = open_ns(procfd, "user", 0);
  int rootfd = openat(procfd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) gone("its init exited");
  if (start_time(procfd) != want_start) gone("its PID belongs to another process now");
  close(procfd);

  /* 2. groups, then every namespace but the user one, then the sandbox's root */
  if (setgroups(0, NULL) != 0) fail("setgroups", NULL);
  for (int i = 0; i < 6; i++) {
    if (fds[i] < 0) continue;
    if (setns(fds[i], 0) != 0) fail("cannot enter namespace", names[i]);
    close(fds[i]);
  }
  if (fchdir(rootfd) != 0 || chroot(".") != 0) fail("cannot enter the sandbox's root", NULL);
  close(rootfd);
  if (chdir(dir) != 0 && chdir("/") != 0) fail("chdir", dir);

  /* 3. the user namespace; its root, with no capability left */
  if (setns(userfd, CLONE_NEWUSER) != 0) fail("cannot enter namespace", "user");
  close(userfd);
  if (setresgid(0, 0, 0) != 0) fail("setresgid", NULL);
  if (setresuid(0, 0, 0) != 0) fail("setresuid", NULL);
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail("PR_CAPBSET_DROP", NULL);
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    fail("PR_CAP_AMBIENT", NULL);
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &hdr, data) != 0) fail("capset", NULL);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("PR_SET_NO_NEW_PRIVS", NULL);
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) fail("seccomp", NULL);

  /* 4. a child in the pid namespace runs the command */
  pid_t child = fork();
  if (child < 0) fail("fork", NULL);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    execvp(cmd[0], cmd);
    int e = errno;
    fprintf(stderr, "rtax-enter: cannot run %s: %s\n", cmd[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }
  int status;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid", NULL);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 126;
}
