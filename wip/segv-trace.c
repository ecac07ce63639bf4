// segv-trace.so: an LD_PRELOAD library that says where a process faulted, for the racecheck
// exit-11 flake (wip/README.md). Not part of any crate; built by racecheck-exit-flake.sh:
//   cc -O1 -g -shared -fPIC -o segv-trace.so segv-trace.c
//
// On SIGSEGV or SIGBUS it writes to stderr (and to $SEGV_TRACE_DIR/segv-<pid>.txt when set) the
// faulting thread, address and PC, a glibc backtrace, every thread's name, and /proc/self/maps
// (so that addresses can be turned into symbols later, with the unstripped binaries). Then it
// hands the signal on to whatever handler the program installed (it interposes sigaction and
// signal, so that nobody replaces it and everybody sees the handler they set), and in the end to
// the default action: the process still dies with signal 11, as before.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn real_sigaction;
// The handlers the program asked for (what it would have had without this library).
static struct sigaction next_segv, next_bus;
static atomic_int printed;
static int out_fd = -1;

static void put(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void put_both(const char *s) {
  put(2, s);
  if (out_fd >= 0) put(out_fd, s);
}

static void hex(char *buf, unsigned long v) {
  static const char d[] = "0123456789abcdef";
  char t[17];
  int i = 16;
  t[i] = 0;
  do {
    t[--i] = d[v & 15];
    v >>= 4;
  } while (v && i > 0);
  strcpy(buf, "0x");
  strcat(buf, t + i);
}

static void dec(char *buf, long v) {
  char t[24];
  int i = 23, neg = v < 0;
  unsigned long u = neg ? -(unsigned long)v : (unsigned long)v;
  t[i] = 0;
  do {
    t[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u && i > 0);
  if (neg) t[--i] = '-';
  strcpy(buf, t + i);
}

static void copy_file(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    buf[n] = 0;
    // (may hold NULs: write raw)
    if (write(2, buf, (size_t)n) < 0) break;
    if (out_fd >= 0 && write(out_fd, buf, (size_t)n) < 0) break;
  }
  close(fd);
}

struct linux_dirent64 {
  unsigned long d_ino;
  long d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static void threads(void) {
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  char buf[8192];
  long n;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
    for (long off = 0; off < n;) {
      struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + off);
      off += e->d_reclen;
      if (e->d_name[0] == '.') continue;
      char path[96] = "/proc/self/task/";
      strcat(path, e->d_name);
      strcat(path, "/comm");
      put_both("  thread ");
      put_both(e->d_name);
      put_both(": ");
      copy_file(path);
    }
  }
  close(fd);
}

static void on_fault(int sig, siginfo_t *info, void *uc) {
  struct sigaction *next = sig == SIGBUS ? &next_bus : &next_segv;
  if (atomic_fetch_add(&printed, 1) == 0) {
    const char *dir = getenv("SEGV_TRACE_DIR");
    if (dir) {
      char path[512], num[24];
      dec(num, getpid());
      snprintf(path, sizeof path, "%s/segv-%s.txt", dir, num);
      out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    char a[40], b[40], c[24], d[24];
    hex(a, (unsigned long)info->si_addr);
    hex(b, (unsigned long)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP]);
    dec(c, syscall(SYS_gettid));
    dec(d, info->si_code);
    put_both("\n=== segv-trace: signal ");
    put_both(sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
    put_both(" code ");
    put_both(d);
    put_both(" at ");
    put_both(a);
    put_both(", pc ");
    put_both(b);
    put_both(", thread ");
    put_both(c);
    put_both(" (");
    copy_file("/proc/thread-self/comm");
    put_both(")\n=== backtrace\n");
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    if (out_fd >= 0) backtrace_symbols_fd(frames, n, out_fd);
    put_both("=== threads\n");
    threads();
    put_both("=== maps\n");
    copy_file("/proc/self/maps");
    put_both("=== end segv-trace\n");
    if (out_fd >= 0) close(out_fd);
    out_fd = -1;
  }
  if (next->sa_handler == SIG_DFL || next->sa_handler == SIG_IGN) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(sig, &dfl, NULL);
    return; // the fault happens again, with the default action
  }
  if (next->sa_flags & SA_SIGINFO)
    next->sa_sigaction(sig, info, uc);
  else
    next->sa_handler(sig);
}

static void install(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  real_sigaction(sig, &sa, sig == SIGBUS ? &next_bus : &next_segv);
}

__attribute__((constructor)) static void segv_trace_init(void) {
  real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  void *warm[2];
  backtrace(warm, 2); // loads libgcc_s now, not in the handler
  install(SIGSEGV);
  install(SIGBUS);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (!real_sigaction) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  if (sig == SIGSEGV || sig == SIGBUS) {
    struct sigaction *next = sig == SIGBUS ? &next_bus : &next_segv;
    if (old) *old = *next;
    if (act) *next = *act;
    return 0;
  }
  return real_sigaction(sig, act, old);
}

sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}
