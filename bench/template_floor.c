/*
 * The floor of "a sandbox from a template" (issue 42), beside bubblewrap's and unshare(1)'s.
 * Built and run by bench/template_floor.py (which documents it); asserts nothing.
 *
 *   template_floor ROUNDS UID FILTER ETC NEWROOT CGROUP_BASES BWRAP_CMD UNSHARE_CMD
 *
 * The parent (host root) starts one template process: it becomes UID, makes a user
 * namespace whose root is UID and a mount namespace in which NEWROOT is a tmpfs holding
 * the sandbox's read-only view (/usr bound read-only, ETC at /etc, the /bin, /lib,
 * /lib64, /sbin links, /dev's null, zero, full, random, urandom bound), made once, and
 * reads FILTER (stage's seccomp program) once. Each environment is then a fork of the
 * template that
 *   - (cgroup variant) is moved by the parent into a fresh cgroup (a directory made in
 *     each of CGROUP_BASES, comma-separated v1 hierarchy directories), before anything
 *     else: its cgroup namespace below is rooted there;
 *   - unshares mount, pid, IPC, UTS, network and cgroup namespaces, and forks pid 1;
 *   - pid 1 mounts its own /proc, /tmp and /workspace (fresh tmpfs: nothing writable is
 *     shared with the template), pivots into NEWROOT, drops every capability, sets
 *     no_new_privs, loads the filter and execs /usr/bin/true.
 * Each round runs, in turn: BWRAP_CMD, UNSHARE_CMD (space-separated argv, spawned and
 * waited for), the template without a cgroup, the template with one made and joined
 * on the request, and with one made and joined before it (a spare fork waiting in its
 * cgroup, told to go); every time is from the parent's monotonic clock, from its
 * request to the environment's exit. It prints one line per variant: the medians in
 * microseconds, and the median of the move alone (of the on-request variant). A last
 * variant is the first with a user namespace of its own per environment (its root the
 * template's), which locks the template's mounts in it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what) {
  fprintf(stderr, "template_floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void put(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s)) die(path);
  close(fd);
}

static void bind_ro(const char *src, const char *dst, int file) {
  if (file) {
    int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) die(dst);
    close(fd);
  } else if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
    die(dst);
  }
  if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0) die(src);
  if (file) return; /* device nodes: as bound (writable, as bwrap's) */
  if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_RDONLY, NULL))
    die(dst);
}

static struct sock_filter insns[BPF_MAXINSNS];
static struct sock_fprog prog;
static char newroot[4096];

/* The template: a user namespace (root = uid), a mount namespace with the view. */
static void make_template(unsigned uid, const char *filter, const char *etc) {
  int ffd = open(filter, O_RDONLY | O_CLOEXEC);
  if (ffd < 0) die(filter);
  ssize_t len = read(ffd, insns, sizeof insns);
  if (len <= 0 || len % (ssize_t)sizeof insns[0] != 0) die("bad filter");
  close(ffd);
  prog.len = (unsigned short)(len / sizeof insns[0]);
  prog.filter = insns;
  if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
    die("drop to uid");
  /* the uid change made it non-dumpable: its /proc/self files would stay root's */
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) die("dumpable");
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) die("unshare user+mnt");
  char map[64];
  snprintf(map, sizeof map, "0 %u 1\n", uid);
  put("/proc/self/setgroups", "deny");
  put("/proc/self/uid_map", map);
  put("/proc/self/gid_map", map);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("make / private");
  if (mount("tmpfs", newroot, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) die("root tmpfs");
  char p[4200];
  snprintf(p, sizeof p, "%s/usr", newroot);
  bind_ro("/usr", p, 0);
  snprintf(p, sizeof p, "%s/etc", newroot);
  bind_ro(etc, p, 0);
  const char *links[][2] = {{"usr/bin", "bin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"},
                            {"usr/sbin", "sbin"}};
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", newroot, links[i][1]);
    if (symlink(links[i][0], p) != 0) die(p);
  }
  const char *dirs[] = {"proc", "tmp", "workspace", "dev"};
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", newroot, dirs[i]);
    if (mkdir(p, 0755) != 0) die(p);
  }
  const char *devs[] = {"null", "zero", "full", "random", "urandom"};
  for (int i = 0; i < 5; i++) {
    char src[64];
    snprintf(src, sizeof src, "/dev/%s", devs[i]);
    snprintf(p, sizeof p, "%s/dev/%s", newroot, devs[i]);
    bind_ro(src, p, 1);
  }
  /* the shared view is read-only from here on: the root tmpfs too */
  if (mount(NULL, newroot, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL))
    die("remount root ro");
}

/* One environment's pid 1: its own writable mounts, the view, no capability, the filter. */
static void env_init(int user, int check) {
  char p[4200];
  /* in a user namespace of its own the template's root is locked, and pivot_root refuses
     a locked new root: a bind of it onto itself is not (its mounts below stay locked) */
  if (user && mount(newroot, newroot, NULL, MS_BIND | MS_REC, NULL) != 0) die("rebind root");
  snprintf(p, sizeof p, "%s/proc", newroot);
  if (mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) die("proc");
  snprintf(p, sizeof p, "%s/tmp", newroot);
  if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) die("tmp");
  snprintf(p, sizeof p, "%s/workspace", newroot);
  if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=2g") != 0) die("ws");
  if (chdir(newroot) != 0 || syscall(SYS_pivot_root, ".", ".") != 0) die("pivot_root");
  if (umount2(".", MNT_DETACH) != 0 || chdir("/workspace") != 0) die("old root");
  if (check) {
    /* may this environment remount the template's shared root file system (its one
       superblock, every environment's)? Asked with read-only, which it already is: the
       kernel checks the right all the same, and nothing changes. 10: allowed, 11: refused */
    int r = mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL);
    _exit(r == 0 ? 10 : errno == EPERM ? 11 : 12);
  }
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("capbset");
  }
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &hdr, data) != 0) die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) die("seccomp");
  char *argv[] = {"true", NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  execve("/usr/bin/true", argv, envp);
  _exit(127);
}

/* The template's loop: per request byte, one environment; `req` gets the env's pid
   (the parent moves it, then writes `ack`), `res` its exit status. */
static void template_loop(int cmd, int req, int ack, int res) {
  char c;
  while (read(cmd, &c, 1) == 1) {
    pid_t env = fork();
    if (env < 0) die("fork");
    if (env == 0) {
      if (c == 'c') {
        pid_t me = getpid();
        char b;
        if (write(req, &me, sizeof me) != sizeof me || read(ack, &b, 1) != 1) _exit(90);
      }
      int user = c == 'u' || c == 'M' ? CLONE_NEWUSER : 0;
      if (unshare(user | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET |
                  CLONE_NEWCGROUP) != 0)
        die("unshare env");
      if (user) { /* its own user namespace, root = the template's root: mounts now locked */
        put("/proc/self/setgroups", "deny");
        put("/proc/self/uid_map", "0 0 1\n");
        put("/proc/self/gid_map", "0 0 1\n");
      }
      pid_t init = fork();
      if (init < 0) die("fork init");
      if (init == 0) env_init(user, c == 'L' || c == 'M');
      int st;
      if (waitpid(init, &st, 0) < 0) die("wait init");
      _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 99);
    }
    int st;
    if (waitpid(env, &st, 0) < 0) die("wait env");
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
    if (write(res, &rc, sizeof rc) != sizeof rc) die("write res");
  }
  _exit(0);
}

static char **split(char *s) {
  static char *out[4][64];
  static int n = 0;
  char **a = out[n++ % 4];
  int i = 0;
  for (char *t = strtok(s, " "); t && i < 63; t = strtok(NULL, " ")) a[i++] = t;
  a[i] = NULL;
  return a;
}

static long long spawn_wait(char **argv) {
  long long t = now_ns();
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
  if (err != 0) {
    errno = err;
    die(argv[0]);
  }
  int st;
  if (waitpid(pid, &st, 0) < 0) die("waitpid");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "template_floor: %s failed (%d)\n", argv[0], st);
    exit(1);
  }
  return now_ns() - t;
}

static int cmp(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static double median_us(long long *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp);
  return (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) / 1000.0;
}

int main(int argc, char **argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: template_floor ROUNDS UID FILTER ETC NEWROOT CGROUP_BASES BWRAP UNSHARE\n");
    return 2;
  }
  int rounds = atoi(argv[1]);
  unsigned uid = (unsigned)strtoul(argv[2], NULL, 10);
  snprintf(newroot, sizeof newroot, "%s", argv[5]);
  char *bases[8];
  int nbases = 0;
  for (char *t = strtok(argv[6], ","); t && nbases < 8; t = strtok(NULL, ",")) bases[nbases++] = t;
  char **bwrap = split(argv[7]);
  char **unshare_cmd = split(argv[8]);
  int cmd[2], req[2], ack[2], res[2];
  if (pipe2(cmd, O_CLOEXEC) || pipe2(req, O_CLOEXEC) || pipe2(ack, O_CLOEXEC) ||
      pipe2(res, O_CLOEXEC))
    die("pipe");
  pid_t tpl = fork();
  if (tpl < 0) die("fork template");
  if (tpl == 0) {
    close(cmd[1]);
    close(req[0]);
    close(ack[1]);
    close(res[0]);
    make_template(uid, argv[3], argv[4]);
    prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0); /* after the uid change, which clears it */
    template_loop(cmd[0], req[1], ack[0], res[1]);
  }
  /* the template's ends: a template that died is then an EOF here, not a hang */
  close(cmd[0]);
  close(req[1]);
  close(ack[0]);
  close(res[1]);
  /* before the rounds, once: the superblock question, without and with the userns */
  const char *asked[] = {"shared-userns", "own-userns"};
  for (int i = 0; i < 2; i++) {
    char c = i ? 'M' : 'L';
    int rc;
    if (write(cmd[1], &c, 1) != 1 || read(res[0], &rc, sizeof rc) != sizeof rc) die("check");
    printf("remount-of-shared-root-%s %d\n", asked[i], rc);
  }
  long long *t[6], *move = malloc(sizeof(long long) * (size_t)rounds);
  for (int k = 0; k < 6; k++) t[k] = malloc(sizeof(long long) * (size_t)rounds);
  for (int r = 0; r < rounds; r++) {
    t[0][r] = spawn_wait(bwrap);
    t[1][r] = spawn_wait(unshare_cmd);
    for (int k = 2; k < 6; k++) {
      /* n: no cgroup; c: a fresh cgroup, made and joined on the request; p: the same,
         made and joined before it (a spare fork waiting in its cgroup): the clock starts
         when the spare is told to go; u: as n, in a user namespace of its own */
      char c = k == 2 ? 'n' : k == 5 ? 'u' : 'c';
      char dirs[8][512];
      long long t0 = now_ns();
      if (c == 'c') {
        for (int i = 0; i < nbases; i++) {
          snprintf(dirs[i], sizeof dirs[i], "%s/rtax-template-floor-%d-%d", bases[i], (int)getpid(), r);
          if (mkdir(dirs[i], 0755) != 0) die(dirs[i]);
        }
      }
      if (write(cmd[1], &c, 1) != 1) die("write cmd");
      if (c == 'c') {
        pid_t env;
        if (read(req[0], &env, sizeof env) != sizeof env) die("the template is gone");
        long long m0 = now_ns();
        char pid[32], f[4200];
        snprintf(pid, sizeof pid, "%d", (int)env);
        for (int i = 0; i < nbases; i++) {
          snprintf(f, sizeof f, "%s/cgroup.procs", dirs[i]);
          put(f, pid);
        }
        if (k == 3) move[r] = now_ns() - m0;
        if (k == 4) t0 = now_ns();
        if (write(ack[1], "g", 1) != 1) die("write ack");
      }
      int rc;
      if (read(res[0], &rc, sizeof rc) != sizeof rc) die("the template is gone");
      t[k][r] = now_ns() - t0;
      if (rc != 0) {
        fprintf(stderr, "template_floor: environment exited %d\n", rc);
        return 1;
      }
      for (int i = 0; c == 'c' && i < nbases; i++) {
        if (rmdir(dirs[i]) != 0) die(dirs[i]);
      }
    }
    usleep(20000); /* as a trial's other phases would: the next create comes later */
  }
  close(cmd[1]);
  waitpid(tpl, NULL, 0);
  printf("bwrap %.1f\n", median_us(t[0], rounds));
  printf("unshare %.1f\n", median_us(t[1], rounds));
  printf("template %.1f\n", median_us(t[2], rounds));
  printf("template+cgroup %.1f\n", median_us(t[3], rounds));
  printf("template+spare %.1f\n", median_us(t[4], rounds));
  printf("template+userns %.1f\n", median_us(t[5], rounds));
  printf("move %.1f\n", median_us(move, rounds));
  return 0;
}
