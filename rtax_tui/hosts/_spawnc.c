/* rtax's spawn in C (hosts/spawn.py): the exec channel's posix_spawn and the exit's
 * pidfd in one call, without ctypes.
 *
 * Same semantics as the ctypes path of hosts/spawn.py, which stays as the fallback where
 * this module was not built (no compiler at install): glibc's posix_spawn (clone with
 * CLONE_VM | CLONE_VFORK, then exec; no Python between the two), stdin /dev/null, stdout
 * and stderr to one descriptor, every other descriptor closed (addclosefrom_np, glibc
 * 2.34), the working directory (addchdir_np), a session of its own
 * (POSIX_SPAWN_SETSID). What it adds: the output pipe made here (its read end
 * non-blocking, both ends close-on-exec, the write end closed once the child has it)
 * and a pidfd of the child (pidfd_open, Linux >= 5.3; close-on-exec), which the event
 * loop watches for the exit: no thread, no SIGCHLD.
 *
 * Built by the project's install (setup.py, an optional extension: where it cannot be
 * compiled, the install goes on without it).
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* A string argument as bytes: str (UTF-8, else the file system encoding with its
 * surrogateescape, as os.fsencode), bytes, or an os.PathLike. Sets *keep to a new
 * reference when it had to make an object (the caller releases it). */
static int as_bytes(PyObject *o, PyObject **keep, const char **s, Py_ssize_t *n)
{
    *keep = NULL;
    if (!PyBytes_Check(o) && !PyUnicode_Check(o)) {
        o = PyOS_FSPath(o);
        if (o == NULL)
            return -1;
        *keep = o;
    }
    if (PyUnicode_Check(o)) {
        *s = PyUnicode_AsUTF8AndSize(o, n);
        if (*s == NULL) { /* lone surrogates: what os.fsencode makes of them */
            PyErr_Clear();
            PyObject *b = PyUnicode_EncodeFSDefault(o);
            Py_XDECREF(*keep);
            *keep = b;
            if (b == NULL)
                return -1;
            o = b;
        }
    }
    if (PyBytes_Check(o)) {
        *s = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
    }
    if ((Py_ssize_t)strlen(*s) != *n) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        Py_CLEAR(*keep);
        return -1;
    }
    return 0;
}

/* The strings copied into one block (no pointer into a Python object survives the GIL's
 * release): `count` pointers then the bytes. */
typedef struct {
    char **vec;
    size_t count;
} strvec;

static int build_argv(PyObject *seq, strvec *out)
{
    PyObject *fast = PySequence_Fast(seq, "argv must be a sequence");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    const char **ptr = PyMem_Malloc(sizeof(char *) * (n + 1) + 1);
    Py_ssize_t *len = PyMem_Malloc(sizeof(Py_ssize_t) * (n + 1));
    PyObject **keep = PyMem_Calloc(n + 1, sizeof(PyObject *));
    size_t total = 0;
    int rc = -1;
    out->vec = NULL;
    if (ptr == NULL || len == NULL || keep == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (as_bytes(items[i], &keep[i], &ptr[i], &len[i]) < 0)
            goto done;
        total += (size_t)len[i] + 1;
    }
    char *block = PyMem_Malloc(sizeof(char *) * (n + 1) + total);
    if (block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    char **vec = (char **)block;
    char *p = block + sizeof(char *) * (n + 1);
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(p, ptr[i], (size_t)len[i] + 1);
        vec[i] = p;
        p += len[i] + 1;
    }
    vec[n] = NULL;
    out->vec = vec;
    out->count = (size_t)n;
    rc = 0;
done:
    if (keep != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(keep[i]);
    PyMem_Free(keep);
    PyMem_Free(len);
    PyMem_Free(ptr);
    Py_DECREF(fast);
    return rc;
}

/* "KEY=VALUE" for each item of a dict, in its order; a key with a "=" refused (the child
 * would read another name and value), as Popen and the ctypes path refuse it. */
static int build_envp(PyObject *env, strvec *out)
{
    if (!PyDict_Check(env)) {
        PyErr_SetString(PyExc_TypeError, "env must be a dict");
        return -1;
    }
    Py_ssize_t n = PyDict_GET_SIZE(env);
    const char **ptr = PyMem_Malloc(sizeof(char *) * (2 * n + 1));
    Py_ssize_t *len = PyMem_Malloc(sizeof(Py_ssize_t) * (2 * n + 1));
    PyObject **keep = PyMem_Calloc(2 * n + 1, sizeof(PyObject *));
    size_t total = 0;
    int rc = -1;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    out->vec = NULL;
    if (ptr == NULL || len == NULL || keep == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    while (i < n && PyDict_Next(env, &pos, &k, &v)) {
        if (as_bytes(k, &keep[2 * i], &ptr[2 * i], &len[2 * i]) < 0 ||
            as_bytes(v, &keep[2 * i + 1], &ptr[2 * i + 1], &len[2 * i + 1]) < 0)
            goto done;
        if (memchr(ptr[2 * i], '=', (size_t)len[2 * i]) != NULL) { /* as Popen refuses it */
            PyErr_SetString(PyExc_ValueError, "illegal environment variable name");
            goto done;
        }
        total += (size_t)len[2 * i] + (size_t)len[2 * i + 1] + 2;
        i++;
    }
    n = i;
    char *block = PyMem_Malloc(sizeof(char *) * (n + 1) + total);
    if (block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    char **vec = (char **)block;
    char *p = block + sizeof(char *) * (n + 1);
    for (i = 0; i < n; i++) {
        vec[i] = p;
        memcpy(p, ptr[2 * i], (size_t)len[2 * i]);
        p += len[2 * i];
        *p++ = '=';
        memcpy(p, ptr[2 * i + 1], (size_t)len[2 * i + 1] + 1);
        p += len[2 * i + 1] + 1;
    }
    vec[n] = NULL;
    out->vec = vec;
    out->count = (size_t)n;
    rc = 0;
done:
    if (keep != NULL)
        for (Py_ssize_t j = 0; j < 2 * n + 1; j++)
            Py_XDECREF(keep[j]);
    PyMem_Free(keep);
    PyMem_Free(len);
    PyMem_Free(ptr);
    return rc;
}

/* Every signal but SIGKILL and SIGSTOP, glibc's own two (32, 33) included: what the child
 * starts with as its default action (POSIX_SPAWN_SETSIGDEF). Without it the step would
 * inherit what rtax ignores (Python ignores SIGPIPE and SIGXFSZ, a `rtax &` from a script
 * SIGINT and SIGQUIT, nohup SIGHUP) and glibc's posix_spawn would leave 32 and 33
 * ignored: `yes | head -1` would end on EPIPE, "Broken pipe", instead of by SIGPIPE.
 * The bits are set by hand: sigaddset and sigfillset leave out glibc's two. */
static void all_signals(sigset_t *set)
{
    const size_t bits = 8 * sizeof set->__val[0];
    sigemptyset(set);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            set->__val[(sig - 1) / bits] |= 1UL << ((sig - 1) % bits);
}

PyDoc_STRVAR(spawn_doc,
"spawn(exe, argv, env, out_fd, cwd) -> (err, pid, rfd, pidfd)\n\n"
"Start `exe` with `argv` and exactly the environment `env` (a dict) in a session of\n"
"its own: stdin /dev/null, stdout and stderr to `out_fd` (-1: a new pipe, whose\n"
"read end, non-blocking, is returned as rfd), every other descriptor closed, in\n"
"`cwd` (None: this process's), every signal at its default action and none blocked.\n"
"err: posix_spawn's error number (0: started; then\n"
"pid, rfd and pidfd are -1). pidfd: -1 where the kernel has no pidfd_open.");

static PyObject *spawn(PyObject *self, PyObject *args)
{
    PyObject *exe_o, *argv_o, *env_o, *cwd_o, *exe_keep = NULL, *cwd_keep = NULL;
    int out_fd;
    const char *exe, *cwd = NULL;
    Py_ssize_t exe_n, cwd_n;
    if (!PyArg_ParseTuple(args, "OOOiO:spawn", &exe_o, &argv_o, &env_o, &out_fd, &cwd_o))
        return NULL;
    strvec av = {NULL, 0}, ev = {NULL, 0};
    PyObject *result = NULL;
    if (as_bytes(exe_o, &exe_keep, &exe, &exe_n) < 0)
        return NULL;
    if (cwd_o != Py_None && as_bytes(cwd_o, &cwd_keep, &cwd, &cwd_n) < 0)
        goto done;
    if (build_argv(argv_o, &av) < 0 || build_envp(env_o, &ev) < 0)
        goto done;

    int fds[2] = {-1, -1};
    int w = out_fd, err = 0, pidfd = -1;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    Py_BEGIN_ALLOW_THREADS
    if (out_fd < 0) {
        if (pipe2(fds, O_CLOEXEC) < 0 ||
            fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK) < 0)
            err = errno;
        w = fds[1];
    }
    if (err == 0) {
        posix_spawn_file_actions_init(&fa);
        posix_spawnattr_init(&attr);
        /* default actions and an empty mask, whatever rtax's thread has (issue 42) */
        sigset_t dfl, none;
        all_signals(&dfl);
        sigemptyset(&none);
        posix_spawnattr_setsigdefault(&attr, &dfl);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETSIGMASK);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, w, 1);
        posix_spawn_file_actions_adddup2(&fa, w, 2);
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        if (cwd != NULL)
            posix_spawn_file_actions_addchdir_np(&fa, cwd);
        err = posix_spawn(&pid, exe, &fa, &attr, av.vec, ev.vec);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
    }
    if (fds[1] >= 0)
        close(fds[1]);
    if (err == 0) {
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
            pidfd = -1;
    } else {
        if (fds[0] >= 0)
            close(fds[0]);
        fds[0] = -1;
        pid = -1;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(iiii)", err, (int)pid, fds[0], pidfd);
done:
    PyMem_Free(av.vec);
    PyMem_Free(ev.vec);
    Py_XDECREF(exe_keep);
    Py_XDECREF(cwd_keep);
    return result;
}

PyDoc_STRVAR(reap_doc,
"reap(pid, spin_us) -> exit code or None\n\n"
"waitpid(pid, WNOHANG), again for up to `spin_us` microseconds while the process is\n"
"not yet a zombie (yielding the CPU between looks; the GIL released): the exit code as\n"
"Popen gives it (-N for signal N), else None. ChildProcessError if `pid` is not a\n"
"child (or was reaped already).");

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *reap(PyObject *self, PyObject *args)
{
    int pid, spin_us, status = 0, err = 0;
    pid_t got = 0;
    if (!PyArg_ParseTuple(args, "ii:reap", &pid, &spin_us))
        return NULL;
    do
        got = waitpid(pid, &status, WNOHANG);
    while (got < 0 && errno == EINTR);
    if (got == 0 && spin_us > 0) {
        Py_BEGIN_ALLOW_THREADS
        long long until = now_ns() + (long long)spin_us * 1000;
        while (got == 0 && now_ns() < until) {
            sched_yield();
            do
                got = waitpid(pid, &status, WNOHANG);
            while (got < 0 && errno == EINTR);
        }
        err = errno;
        Py_END_ALLOW_THREADS
        errno = err;
    }
    if (got < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (got == 0)
        Py_RETURN_NONE;
    if (WIFSIGNALED(status))
        return PyLong_FromLong(-WTERMSIG(status));
    return PyLong_FromLong(WEXITSTATUS(status));
}

static PyMethodDef methods[] = {
    {"spawn", spawn, METH_VARARGS, spawn_doc},
    {"reap", reap, METH_VARARGS, reap_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spawnc", "rtax's posix_spawn and pidfd, in C (hosts/spawn.py).",
    -1, methods,
};

/* What hosts/spawn.py checks (its _C_VERSION) before it uses this module: one left built
 * from an older source (an editable install not reinstalled after a pull) is not used.
 * Raised with each change of what spawn or reap does. 2: the signals reset, a "=" in an
 * environment name refused. */
#define SPAWNC_VERSION 2

PyMODINIT_FUNC PyInit__spawnc(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", SPAWNC_VERSION) < 0)
        Py_CLEAR(m);
    return m;
}
