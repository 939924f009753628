/*
 * lab-init in C: what lab/cmd/lab-init does (its doc comment is the
 * reference), for labs of hundreds of hosts, one init each: the Go build
 * costs ~0.65 MiB PSS per host, this one a few pages. pid 1 of a lab
 * host's PID and mount namespace: it mounts that namespace's /proc, says
 * "ready", reaps the orphans re-parented to it and ignores the signals
 * its namespace may send it, until the lab kills it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what)
{
	dprintf(2, "lab-init: %s: %s\n", what, strerror(errno));
	exit(2);
}

int main(void)
{
	if (getpid() != 1) {
		dprintf(2, "lab-init: pid %d: not pid 1 of a new PID namespace (the lab starts it with CLONE_NEWPID|CLONE_NEWNS)\n", (int)getpid());
		return 2;
	}
	/* Private first: the /proc mounted below must not reach the machine's
	 * mount namespace (nor any other lab host's). */
	if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("make / private");
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		fail("mount /proc");
	int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};
	for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
		signal(ignored[i], SIG_IGN);
	/* SIGCHLD blocked, so that it stays pending for sigwaitinfo (a blocked
	 * signal is never discarded) and no exit slips in between a reap and
	 * the wait for the next one. */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
		fail("block SIGCHLD");
	static const char ready[] = "ready\n";
	if (write(1, ready, sizeof ready - 1) != (ssize_t)(sizeof ready - 1))
		fail("say ready");
	close(1);
	for (;;) {
		/* Signals coalesce: reap every child that has exited. */
		while (waitpid(-1, NULL, WNOHANG) > 0) {
		}
		if (sigwaitinfo(&chld, NULL) < 0 && errno != EINTR)
			fail("wait for SIGCHLD");
	}
}
