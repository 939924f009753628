/*
 * gpu-holder in C: the same flags, ready lines and behaviour as the Go
 * lab/cmd/gpu-holder (its doc comment is the reference), for labs of
 * hundreds of hosts. A Go holder costs ~0.7-1.2 MiB PSS per process (the
 * runtime's heap, stacks and threads); this one, linked statically, costs
 * a few pages. The lab builds it with `cc` when there is one (lab.Build).
 *
 * Flags are parsed as Go's flag package does: -name or --name, a value
 * after '=' or as the next argument (bools take '=' only), parsing stops at
 * the first non-flag or "--", usage errors exit 2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_DEVS 64

static const char *devs[MAX_DEVS];
static int ndevs;
static int fds[MAX_DEVS];

static void die(int code, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n = snprintf(buf, sizeof buf, "gpu-holder: ");
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof buf - n, fmt, ap);
	va_end(ap);
	strncat(buf, "\n", sizeof buf - strlen(buf) - 1);
	if (write(2, buf, strlen(buf)) < 0) {
		/* nothing left to tell */
	}
	exit(code);
}

/* say writes "ready <pid>\n" in one write, unbuffered as Go's Println is. */
static void say_ready(int pid)
{
	char buf[32];
	int n = snprintf(buf, sizeof buf, "ready %d\n", pid);
	if (write(1, buf, n) < 0) {
		/* as the Go holder: the reader went away, carry on holding */
	}
}

/* self_pid is the pid the machine's /proc names this process by (see
 * labgpu.SelfPID): in a lab host's PID namespace getpid() is the
 * namespace's pid, while /proc stays the machine's. */
static int self_pid(void)
{
	char link[32];
	ssize_t n = readlink("/proc/self", link, sizeof link - 1);
	if (n > 0) {
		link[n] = 0;
		char *end;
		long pid = strtol(link, &end, 10);
		if (*end == 0 && pid > 0)
			return (int)pid;
	}
	return getpid();
}

static long long parse_int(const char *name, const char *v)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 0);
	if (*v == 0 || *end != 0 || errno != 0)
		die(2, "invalid value \"%s\" for flag -%s: parse error", v, name);
	return n;
}

static int parse_bool(const char *name, const char *v)
{
	static const char *yes[] = {"1", "t", "T", "true", "TRUE", "True"};
	static const char *no[] = {"0", "f", "F", "false", "FALSE", "False"};
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
		if (strcmp(v, yes[i]) == 0)
			return 1;
		if (strcmp(v, no[i]) == 0)
			return 0;
	}
	die(2, "invalid boolean value \"%s\" for -%s: parse error", v, name);
	return 0;
}

static long long mem, child_mem, keeps_mem;
static int keeps_of, ignore_term, catch_term, keeper, zombie;

static void usage(void)
{
	static const char text[] =
	    "Usage of gpu-holder:\n"
	    "  --dev FILE          device file to hold open (repeatable)\n"
	    "  --mem-mib N         GPU memory (MiB) this process uses on each GPU device it holds\n"
	    "  --ignore-term       ignore SIGTERM\n"
	    "  --catch-term        catch SIGTERM and carry on\n"
	    "  --child-mem-mib N   also start a child holder of the same devices that outlives this process\n"
	    "  --keeper            also start a child that inherits the open devices and keeps this process's memory\n"
	    "  --keeps-mem-of PID  (set by --keeper) pid whose memory this process keeps alive\n"
	    "  --keeps-mem-mib N   (set by --keeper) how much memory that is, per GPU\n"
	    "  --zombie-leader     after ready, exit the main thread only\n";
	if (write(2, text, sizeof text - 1) < 0) {
		/* nothing left to tell */
	}
}

static void parse(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-' || a[1] == 0)
			return; /* first non-flag: the rest are arguments */
		a++;
		if (*a == '-') {
			a++;
			if (*a == 0)
				return; /* "--" ends the flags */
		}
		if (*a == '-' || *a == '=')
			die(2, "bad flag syntax: %s", argv[i]);
		char name[64];
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof name)
			die(2, "flag provided but not defined: -%s", a);
		memcpy(name, a, len);
		name[len] = 0;
		const char *val = eq ? eq + 1 : NULL;

		int *boolp = NULL;
		if (strcmp(name, "ignore-term") == 0)
			boolp = &ignore_term;
		else if (strcmp(name, "catch-term") == 0)
			boolp = &catch_term;
		else if (strcmp(name, "keeper") == 0)
			boolp = &keeper;
		else if (strcmp(name, "zombie-leader") == 0)
			boolp = &zombie;
		if (boolp) {
			*boolp = val ? parse_bool(name, val) : 1;
			continue;
		}
		if (strcmp(name, "help") == 0 || strcmp(name, "h") == 0) {
			usage();
			exit(0);
		}
		if (strcmp(name, "dev") != 0 && strcmp(name, "mem-mib") != 0 && strcmp(name, "child-mem-mib") != 0 &&
		    strcmp(name, "keeps-mem-of") != 0 && strcmp(name, "keeps-mem-mib") != 0) {
			usage();
			die(2, "flag provided but not defined: -%s", name);
		}
		if (!val) {
			if (i + 1 >= argc)
				die(2, "flag needs an argument: -%s", name);
			val = argv[++i];
		}
		if (strcmp(name, "dev") == 0) {
			if (ndevs == MAX_DEVS)
				die(2, "more than %d --dev", MAX_DEVS);
			devs[ndevs++] = val;
		} else if (strcmp(name, "mem-mib") == 0) {
			mem = parse_int(name, val);
		} else if (strcmp(name, "child-mem-mib") == 0) {
			child_mem = parse_int(name, val);
		} else if (strcmp(name, "keeps-mem-of") == 0) {
			long long v = parse_int(name, val);
			if (v < INT_MIN || v > INT_MAX)
				die(2, "invalid value \"%s\" for flag -%s: value out of range", val, name);
			keeps_of = (int)v;
		} else {
			keeps_mem = parse_int(name, val);
		}
	}
}

/* A handler, not SIG_IGN: the kernel delivers TERM, the process decides
 * (as a worker that drains before exiting would). */
static void on_term(int sig) { (void)sig; }

/* self_exe is this program's path (os.Executable): exec'ing /proc/self/exe
 * itself would give the child the comm "exe" instead of this file's name. */
static void self_exe(char *buf, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", buf, size - 1);
	if (n <= 0)
		die(1, "read /proc/self/exe: %s", strerror(errno));
	buf[n] = 0;
}

/* spawn_ready runs path with argv, its stdout a pipe, and returns the pid
 * of its ready line. It is never waited for: it outlives this process,
 * re-parented. With inherit, the device fds become its fds 3.. (what
 * Go's ExtraFiles does); every other fd of ours is close-on-exec. */
static int spawn_ready(const char *what, const char *path, char **argv, int inherit)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		die(1, "%s: pipe: %s", what, strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die(1, "%s: fork: %s", what, strerror(errno));
	if (pid == 0) {
		if (dup2(p[1], 1) < 0)
			_exit(127);
		if (inherit) {
			/* Out of the way first: dup2 onto an fd that is still one
			 * of the sources would lose it. */
			int high[MAX_DEVS];
			for (int i = 0; i < ndevs; i++)
				if ((high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3 + MAX_DEVS)) < 0)
					_exit(127);
			for (int i = 0; i < ndevs; i++)
				if (dup2(high[i], 3 + i) < 0) /* dup2 clears close-on-exec */
					_exit(127);
		}
		/* As a Go child would: its runtime handles TERM whatever we ignore. */
		signal(SIGTERM, SIG_DFL);
		execv(path, argv);
		dprintf(2, "gpu-holder: start %s %s: %s\n", what, path, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	char line[64];
	size_t n = 0;
	while (n < sizeof line - 1) {
		ssize_t r = read(p[0], line + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die(1, "%s: %s %d exited before ready", what, what, (int)pid);
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	/* The read end stays open: the child never blocks writing to it. */
	char *end = line;
	long got = 0;
	if (strncmp(line, "ready ", 6) == 0)
		got = strtol(line + 6, &end, 10);
	if (got <= 0 || *end != 0)
		die(1, "%s: %s said \"%s\", want ready <pid>", what, what, line);
	return (int)got;
}

static char numbuf[3][32];

static int start_child(void)
{
	char exe[PATH_MAX];
	self_exe(exe, sizeof exe);
	char *argv[2 * MAX_DEVS + 4];
	int n = 0;
	argv[n++] = exe;
	for (int i = 0; i < ndevs; i++) {
		argv[n++] = "--dev";
		argv[n++] = (char *)devs[i];
	}
	snprintf(numbuf[0], sizeof numbuf[0], "%lld", child_mem);
	argv[n++] = "--mem-mib";
	argv[n++] = numbuf[0];
	argv[n] = NULL;
	return spawn_ready("child", exe, argv, 0);
}

static int start_keeper(char *argv0)
{
	char exe[PATH_MAX];
	self_exe(exe, sizeof exe);
	static char fdpath[MAX_DEVS][24];
	char *argv[2 * MAX_DEVS + 6];
	int n = 0;
	argv[n++] = argv0; /* as a fork keeps it (python3) */
	for (int i = 0; i < ndevs; i++) {
		/* The child reopens nothing: /dev/fd/N is the inherited file. */
		snprintf(fdpath[i], sizeof fdpath[i], "/dev/fd/%d", 3 + i);
		argv[n++] = "--dev";
		argv[n++] = fdpath[i];
	}
	/* getpid, as the Go holder: the host's fake nvidia-smi reads the
	 * host's /proc, where this is our pid. */
	snprintf(numbuf[1], sizeof numbuf[1], "%d", (int)getpid());
	snprintf(numbuf[2], sizeof numbuf[2], "%lld", mem);
	argv[n++] = "--keeps-mem-of";
	argv[n++] = numbuf[1];
	argv[n++] = "--keeps-mem-mib";
	argv[n++] = numbuf[2];
	argv[n] = NULL;
	return spawn_ready("keeper", exe, argv, 1);
}

static void *hold_forever(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	parse(argc, argv);
	if (ndevs == 0)
		die(2, "at least one --dev is required");
	if (mem < 0 || child_mem < 0)
		die(2, "memory must be >= 0");
	if (ignore_term)
		signal(SIGTERM, SIG_IGN);
	if (catch_term) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_term;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
	}
	for (int i = 0; i < ndevs; i++) {
		fds[i] = open(devs[i], O_RDONLY | O_CLOEXEC);
		if (fds[i] < 0)
			die(1, "open device: open %s: %s", devs[i], strerror(errno));
	}
	if (mem > 0 || keeps_of > 0) {
		/* A CUDA context maps the device files (the helper tells owners
		 * from monitors by that); monitors map nothing. */
		for (int i = 0; i < ndevs; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fds[i], 0) == MAP_FAILED)
				die(1, "map %s: %s", devs[i], strerror(errno));
	}
	int child = 0;
	if (child_mem > 0)
		child = start_child();
	if (keeper)
		child = start_keeper(argv[0]);
	say_ready(self_pid());
	if (child > 0)
		say_ready(child);
	if (zombie) {
		/* The leader exits alone (exit(2), not exit_group(2)) and turns Z;
		 * this thread shares the fd table and keeps the devices open. */
		pthread_t t;
		int err = pthread_create(&t, NULL, hold_forever, NULL);
		if (err != 0)
			die(1, "zombie-leader: start a thread: %s", strerror(err));
		syscall(SYS_exit, 0);
	}
	hold_forever(NULL);
	return 0;
}
