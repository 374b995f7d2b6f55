/*
 * rtax-vmagent: the VM guest's agent (see rtax_tui/core/vmimage.py), pid 1 of the
 * guest, run as the guest's root. Compiled static with the host's C compiler when the
 * initramfs is built.
 *
 *   /.rtax/agent PORT [SHELL]
 *
 * The workload is hostile: it has read this file and tries to make a later step's
 * failure be recorded as a success. So the agent never runs workload code in its own
 * process: every command runs as the unprivileged guest user (uid/gid 1000, HOME
 * /workspace), and every trailer on the port is written by the agent, which the user
 * can neither signal, trace nor read (other uid, and PR_SET_DUMPABLE 0). The user
 * never holds the port: its output reaches the port through the agent.
 *
 * Host to guest: a line `OP ID N MARK [SENTINEL]`, then N lines. Guest to host:
 * output, then the trailer `\nMARK ID RC DUR_NS FLAG\n`. FLAG is `ok`, `lost` (the
 * shell is gone) or `integrity` (the shell is no longer the one the agent started).
 *
 *   P  ping: no output, RC 0.
 *   E  the N lines are a command: busybox `sh -c` as the user (the execute-only copy
 *      below, so busybox's applets run without an exec, as under the old agent), one
 *      process; its stdout and stderr (a socket) go to the port until it exits; RC
 *      from the agent's own waitpid (128 + signal when killed).
 *   S  the N lines are a framed command (drivers/shellframe.py's `frame`) for the
 *      persistent shell: an execute-only busybox (mode 0111, root's: the kernel makes
 *      a process whose file it can't read non-dumpable, so no step can write its
 *      memory) run as the user, started before the hello. Its stdout and stderr are a
 *      unix socket with SO_PASSCRED: the frame `\nSENTINEL RC\n` counts only where the
 *      shell's own pid wrote all of it (a background process printing frames is
 *      output); the bytes before it are the output, sent as they are. After each
 *      answer the agent checks /proc/PID/exe and /proc/PID/auxv are those of the
 *      shell it started (an `exec` changes them); if not, the flag is `integrity` and
 *      the shell is never used again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>

#define USER_ID 1000
static const char *SHELL = "/.rtax/ush";
#define HELLO "RTAX-HELLO\n"

static char *const ENVP[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/workspace", "USER=rtax", "LOGNAME=rtax", "TMPDIR=/tmp",
    "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1",
    "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory",
    "GIT_CONFIG_VALUE_0=*", NULL,
};

/* -- growable buffers ------------------------------------------------------------ */

struct buf {
  char *p;
  size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (b->n + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) _exit(111);
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void drop(struct buf *b, size_t n) {
  memmove(b->p, b->p + n, b->n - n);
  b->n -= n;
  if (b->p) b->p[b->n] = 0;
}

static int writeall(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* -- the port ---------------------------------------------------------------------- */

static int port = -1;
static struct buf pin;  /* bytes read from the port, not yet used */

/* One line from the port (without its newline) into `line`; -1 when the port closed. */
static int port_line(struct buf *line) {
  line->n = 0;
  for (;;) {
    char *nl = pin.n ? memchr(pin.p, '\n', pin.n) : NULL;
    if (nl) {
      size_t k = (size_t)(nl - pin.p);
      put(line, pin.p, k);
      drop(&pin, k + 1);
      return 0;
    }
    char tmp[65536];
    ssize_t r = read(port, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    put(&pin, tmp, (size_t)r);
  }
}

/* -- processes of the user ---------------------------------------------------------- */

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

/* In a forked child: stdin `in`, stdout and stderr `out`, no other fd, the user's
 * ids and no supplementary group, its own session, in /workspace; then exec. */
static void become_user_and_exec(int in, int out, const char *path, char *const argv[]) {
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(126);
  syscall(SYS_close_range, 3, ~0U, 0);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  if (chdir("/workspace") != 0 && chdir("/") != 0) _exit(126);
  if (setgroups(0, NULL) != 0 || setresgid(USER_ID, USER_ID, USER_ID) != 0 ||
      setresuid(USER_ID, USER_ID, USER_ID) != 0)
    _exit(126);
  if (getuid() != USER_ID || geteuid() != USER_ID) _exit(126);
  umask(022);
  execve(path, argv, ENVP);
  _exit(127);
}

static int devnull(void) { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

static int status_rc(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 255;
}

static void trailer(const char *mark, const char *id, int rc, long long dur, const char *flag) {
  char t[512];
  int k = snprintf(t, sizeof t, "\n%s %s %d %lld %s\n", mark, id, rc, dur, flag);
  writeall(port, t, (size_t)k);
}

/* E: one process as the user; its output to the port until it exits. */
static int run_exec(const char *cmd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 126;
  int nul = devnull();
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    become_user_and_exec(nul, sv[1], SHELL, argv);  /* busybox sh, as the old agent's */
  }
  close(sv[1]);
  close(nul);
  if (pid < 0) {
    close(sv[0]);
    return 126;
  }
  int pfd = pidfd_open_(pid);
  char tmp[65536];
  int open_ = 1;
  while (pfd >= 0) {
    struct pollfd fds[2] = {{pfd, POLLIN, 0}, {open_ ? sv[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) {
      ssize_t r = read(sv[0], tmp, sizeof tmp);
      if (r > 0) writeall(port, tmp, (size_t)r);
      else if (r == 0 || errno != EINTR) open_ = 0;
      continue;  /* what it printed before it exited, first */
    }
    if (fds[0].revents) break;
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (pfd >= 0) close(pfd);
  /* what is left (its background processes keep the socket: not waited for) */
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  for (;;) {
    ssize_t r = read(sv[0], tmp, sizeof tmp);
    if (r > 0) writeall(port, tmp, (size_t)r);
    else if (r < 0 && errno == EINTR) continue;
    else break;
  }
  close(sv[0]);
  return status_rc(st);
}

/* -- the persistent shell ------------------------------------------------------------ */

static struct {
  pid_t pid;
  int pidfd, in, out;  /* its pidfd, its stdin's write end, our end of its stdout */
  int dead;            /* lost or not to be trusted: never used again */
  char exe[4096];
  struct buf auxv;
  struct buf got;       /* bytes read from `out`, not yet used */
  size_t *ends;         /* got's segments: end offset ... */
  pid_t *pids;          /* ... and the pid that wrote it */
  size_t nseg, capseg;
} sh = {.pid = -1, .pidfd = -1, .in = -1, .out = -1};

static void seg_add(size_t end, pid_t pid) {
  if (sh.nseg && sh.pids[sh.nseg - 1] == pid) {
    sh.ends[sh.nseg - 1] = end;
    return;
  }
  if (sh.nseg == sh.capseg) {
    sh.capseg = sh.capseg ? sh.capseg * 2 : 64;
    sh.ends = realloc(sh.ends, sh.capseg * sizeof *sh.ends);
    sh.pids = realloc(sh.pids, sh.capseg * sizeof *sh.pids);
    if (!sh.ends || !sh.pids) _exit(111);
  }
  sh.ends[sh.nseg] = end;
  sh.pids[sh.nseg] = pid;
  sh.nseg++;
}

/* Did `pid` alone write bytes [a, b) of got? */
static int wrote_all(size_t a, size_t b, pid_t pid) {
  size_t begin = 0;
  for (size_t i = 0; i < sh.nseg; i++) {
    if (sh.ends[i] > a && begin < b && sh.pids[i] != pid) return 0;
    begin = sh.ends[i];
  }
  return 1;
}

static void got_take(size_t n) {
  drop(&sh.got, n);
  size_t j = 0;
  for (size_t i = 0; i < sh.nseg; i++) {
    if (sh.ends[i] > n) {
      sh.ends[j] = sh.ends[i] - n;
      sh.pids[j] = sh.pids[i];
      j++;
    }
  }
  sh.nseg = j;
}

/* One read of the shell's socket, with the writer's pid. 0: read; -1: closed. */
static int got_read(void) {
  char tmp[65536];
  union {
    char c[CMSG_SPACE(sizeof(struct ucred))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {tmp, sizeof tmp};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.c;
  m.msg_controllen = sizeof ctl.c;
  ssize_t r;
  do r = recvmsg(sh.out, &m, MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EAGAIN) return 0;
  if (r <= 0) return -1;
  pid_t pid = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      struct ucred u;
      memcpy(&u, CMSG_DATA(c), sizeof u);
      pid = u.pid;
    }
  put(&sh.got, tmp, (size_t)r);
  seg_add(sh.got.n, pid);
  return 0;
}

/* Find `sep` in got written whole by the shell, from offset `from`; its offset or -1. */
static long find_by_shell(const char *sep, size_t from) {
  size_t k = strlen(sep);
  for (size_t i = from; i + k <= sh.got.n; i++)
    if (memcmp(sh.got.p + i, sep, k) == 0 && wrote_all(i, i + k, sh.pid)) return (long)i;
  return -1;
}

/* Until the shell wrote `sep` (then its offset in got), or -1 when it is gone. */
static long wait_for(const char *sep) {
  size_t from = 0;
  int exited = 0;
  for (;;) {
    long i = find_by_shell(sep, from);
    if (i >= 0) return i;
    size_t k = strlen(sep);
    from = sh.got.n >= k ? sh.got.n - k + 1 : 0;
    if (exited) {  /* drained after its exit: the frame will never come */
      size_t before = sh.got.n;
      if (got_read() < 0 || sh.got.n == before) return -1;
      continue;
    }
    struct pollfd fds[2] = {{sh.out, POLLIN, 0}, {sh.pidfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (fds[0].revents && got_read() < 0) exited = 1;
    if (fds[1].revents) exited = 1;
  }
}

static int read_file(const char *path, struct buf *b) {
  b->n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char tmp[4096];
  ssize_t r;
  while ((r = read(fd, tmp, sizeof tmp)) > 0) put(b, tmp, (size_t)r);
  close(fd);
  return r < 0 ? -1 : 0;
}

/* The shell is still the process the agent started, running what it started (no
 * exec since): 0, else -1. The first call records what it runs. */
static int verify(int first) {
  char path[64], exe[4096];
  snprintf(path, sizeof path, "/proc/%d/exe", (int)sh.pid);
  ssize_t k = readlink(path, exe, sizeof exe - 1);
  if (k < 0) return -1;
  exe[k] = 0;
  struct buf auxv = {0};
  snprintf(path, sizeof path, "/proc/%d/auxv", (int)sh.pid);
  int ok = read_file(path, &auxv) == 0 && auxv.n > 0;
  if (ok && first) {
    memcpy(sh.exe, exe, (size_t)k + 1);
    sh.auxv.n = 0;
    put(&sh.auxv, auxv.p, auxv.n);
  } else if (ok) {
    ok = strcmp(exe, sh.exe) == 0 && auxv.n == sh.auxv.n &&
         memcmp(auxv.p, sh.auxv.p, auxv.n) == 0;
  }
  free(auxv.p);
  return ok ? 0 : -1;
}

static void shell_gone(void) {
  sh.dead = 1;
  if (sh.pid > 0) kill(sh.pid, SIGKILL);
  if (sh.in >= 0) close(sh.in);
  sh.in = -1;
}

/* Send `text` to the shell; wait for `\nSENT ` then `\n` from it. On success, the
 * output (before the frame) in *out_n bytes of got and the status in *rc. */
static int exchange(const char *text, size_t n, const char *sent, size_t *out_n, int *rc) {
  if (writeall(sh.in, text, n) != 0) return -1;
  char marker[128];
  snprintf(marker, sizeof marker, "\n%s ", sent);
  long i = wait_for(marker);
  if (i < 0) return -1;
  size_t after = (size_t)i + strlen(marker);
  long j;
  for (;;) {  /* the newline after the status, by the shell too */
    j = find_by_shell("\n", after);
    if (j >= 0) break;
    struct pollfd fds[2] = {{sh.out, POLLIN, 0}, {sh.pidfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return -1;
    if (fds[0].revents && got_read() < 0) return -1;
    if (fds[1].revents && !fds[0].revents) return -1;
  }
  char st[32] = {0};
  size_t len = (size_t)j - after;
  if (len == 0 || len >= sizeof st) return -1;
  memcpy(st, sh.got.p + after, len);
  char *end;
  long v = strtol(st, &end, 10);
  if (*end != 0 && *end != ' ') return -1;
  *rc = (int)v;
  *out_n = (size_t)i;
  return (int)((size_t)j + 1 - (size_t)i);  /* the frame's length */
}

static int shell_start(void) {
  int p[2], sv[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  int one = 1;
  setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[] = {"sh", NULL};
    become_user_and_exec(p[0], sv[1], SHELL, argv);
  }
  close(p[0]);
  close(sv[1]);
  if (pid < 0) return -1;
  sh.pid = pid;
  sh.in = p[1];
  sh.out = sv[0];
  sh.pidfd = pidfd_open_(pid);
  if (sh.pidfd < 0) return -1;
  /* before any step: the shell answers a frame of its own, then is recorded */
  const char *hello = "\\printf '\\n%s %d\\n' __RTAX_SHELL_UP__ 0\n";
  size_t out_n;
  int rc, k = exchange(hello, strlen(hello), "__RTAX_SHELL_UP__", &out_n, &rc);
  if (k < 0 || verify(1) != 0) return -1;
  got_take(out_n + (size_t)k);
  return 0;
}

static void run_shell(const char *id, const char *mark, const char *sent, const char *text,
                      size_t n) {
  long long t0 = now_ns();
  if (sh.dead || sh.pid < 0) {
    trailer(mark, id, 255, now_ns() - t0, "lost");
    return;
  }
  size_t out_n;
  int rc, k = exchange(text, n, sent, &out_n, &rc);
  long long dur = now_ns() - t0;
  if (k < 0) {
    writeall(port, sh.got.p, sh.got.n);
    got_take(sh.got.n);
    shell_gone();
    trailer(mark, id, 255, dur, "lost");
    return;
  }
  int ok = verify(0) == 0;
  writeall(port, sh.got.p, out_n);
  got_take(out_n + (size_t)k);
  if (!ok) shell_gone();
  trailer(mark, id, rc, dur, ok ? "ok" : "integrity");
}

/* -- serving ------------------------------------------------------------------------------ */

static void reap(void) {  /* pid 1: the orphans of the user's processes */
  int st;
  pid_t p;
  while ((p = waitpid(-1, &st, WNOHANG)) > 0)
    if (p == sh.pid) {  /* its pid may be reused now: never trusted (nor killed) again */
      sh.pid = -2;
      shell_gone();
    }
}

static int serve(void) {
  struct buf head = {0}, line = {0}, body = {0};
  for (;;) {
    reap();
    if (port_line(&head) < 0) return -1;
    char *w[6] = {0};
    int nw = 0;
    for (char *s = strtok(head.p, " "); s && nw < 6; s = strtok(NULL, " ")) w[nw++] = s;
    if (nw < 4) continue;
    long n = strtol(w[2], NULL, 10);
    body.n = 0;
    for (long i = 0; i < n; i++) {
      if (port_line(&line) < 0) return -1;
      if (i) put(&body, "\n", 1);
      put(&body, line.p ? line.p : "", line.n);
    }
    if (!body.p) put(&body, "", 0);
    const char *op = w[0], *id = w[1], *mark = w[3];
    if (strcmp(op, "S") == 0 && nw >= 5) {
      put(&body, "\n", 1);
      run_shell(id, mark, w[4], body.p, body.n);
    } else if (strcmp(op, "E") == 0) {
      long long t0 = now_ns();
      int rc = run_exec(body.p);
      trailer(mark, id, rc, now_ns() - t0, "ok");
    } else {
      trailer(mark, id, 0, 0, "ok");
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (argc > 2) SHELL = argv[2];  /* tests */
  prctl(PR_SET_DUMPABLE, 0);
  int fd;
  while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd < 3) {  /* 0-1-2 taken */
  }
  if (fd > 2) close(fd);
  signal(SIGPIPE, SIG_IGN);
  if (getpid() == 1) {  /* in the guest (tests run it on the host) */
    mkdir("/tmp", 01777);
    chmod("/tmp", 01777);
  }
  /* the persistent shell before the hello: part of `ready`, not of the first step */
  if (shell_start() != 0) shell_gone();
  for (;;) {
    reap();
    port = open(argv[1], O_RDWR | O_CLOEXEC);
    if (port >= 0) {
      pin.n = 0;
      if (writeall(port, HELLO, strlen(HELLO)) == 0) serve();
      close(port);
      port = -1;
    }
    usleep(20000);
  }
}
