package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// container is one container's main process: a bubblewrap sandbox with its own mount, PID,
// IPC and UTS namespaces. Every exec into the container joins those namespaces (nsenter,
// as runc exec joins the namespaces of a container's init), so execs see each other's and
// the main process's processes, share one root, and outlive their stream, as on a node
// running containerd. When the main process exits, the kernel kills every process left in
// its PID namespace: the container's execs end with it.
type container struct {
	// ready is closed once the namespaces are set up or starting failed (err says why).
	ready chan struct{}
	err   error
	// pid is the host PID of the sandbox's PID 1 (bubblewrap's init), the process whose
	// namespaces an exec enters.
	pid  int
	proc *exec.Cmd
	// exited is closed when the main process has ended (or never started); exitCode is
	// its status then (128+signal when killed by one, as a shell reports it).
	exited   chan struct{}
	exitCode int
	mu       sync.Mutex
	killed   bool
	// env is the environment execs get (the main process's); startedAt and id are what
	// the status of a container on a real node reports.
	env       []string
	startedAt metav1.Time
	id        string
}

// containerStartTimeout bounds how long an exec waits for a container being set up.
const containerStartTimeout = 15 * time.Second

// readyShim runs as the sandbox's first command: it tells the kubelet the mounts are in
// place (a byte on fd 4), closes the kubelet's fds and becomes the container's command.
// bubblewrap reports the init's PID on --info-fd before it sets the mounts up, so the PID
// alone would let an exec enter a half-built mount namespace.
const readyShim = `exec 3>&-; printf . >&4; exec 4>&-; exec "$@"`

// holdCommand keeps a container without a command running: the image's entrypoint is
// unknown here, and a running container must have namespaces to exec into.
var holdCommand = []string{"sleep", "infinity"}

// withReadyShim is the command the sandbox runs for a container command cmd.
func withReadyShim(cmd []string) []string {
	return append([]string{"/bin/sh", "-c", readyShim, "sbx-init"}, cmd...)
}

// startContainer launches the main process (bubblewrap with args, whose command is
// withReadyShim(...)) with stdout and stderr going to log, and returns at once; callers
// wait on ready through running(). launcher, if set, is a command prefix that execs
// bubblewrap (nsenter --net=... for pods with their own network namespace).
func startContainer(launcher []string, bwrap string, args []string, log *os.File) *container {
	c := &container{ready: make(chan struct{}), exited: make(chan struct{})}
	fail := func(err error) *container {
		c.err = err
		close(c.ready)
		close(c.exited)
		return c
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		infoR.Close()
		infoW.Close()
		return fail(err)
	}
	argv := append(append(append([]string{}, launcher...), bwrap, "--info-fd", "3"), args...)
	proc := exec.Command(argv[0], argv[1:]...)
	proc.Stdout, proc.Stderr = log, log
	proc.ExtraFiles = []*os.File{infoW, readyW} // fds 3 and 4
	// its own session: see ExecInContainer
	proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	err = proc.Start()
	infoW.Close()
	readyW.Close()
	if err != nil {
		infoR.Close()
		readyR.Close()
		return fail(err)
	}
	c.proc = proc
	go func() { c.exitCode = exitCodeOf(proc.Wait()); close(c.exited) }()
	go func() {
		defer infoR.Close()
		defer readyR.Close()
		c.err = awaitSetup(infoR, readyR, &c.pid)
		if c.err != nil {
			c.kill()
		}
		close(c.ready)
	}()
	return c
}

// awaitSetup reads the init's PID from bubblewrap's info and then the shim's ready byte.
func awaitSetup(info, ready *os.File, pid *int) error {
	deadline := time.Now().Add(containerStartTimeout)
	_ = info.SetReadDeadline(deadline)
	_ = ready.SetReadDeadline(deadline)
	var st struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&st); err != nil || st.ChildPid <= 0 {
		return fmt.Errorf("the sandbox did not start (bubblewrap reported no PID: %v); its error is in the container log", err)
	}
	*pid = st.ChildPid
	b := make([]byte, 1)
	if _, err := io.ReadFull(ready, b); err != nil {
		return fmt.Errorf("the sandbox did not finish setting up (%v); its error is in the container log", err)
	}
	return nil
}

// running waits for the container to be set up and answers the PID to enter, or why an
// exec cannot run in it (as a kubelet refuses exec into a container that is not running).
func (c *container) running() (int, error) {
	select {
	case <-c.ready:
	case <-time.After(containerStartTimeout):
		return 0, fmt.Errorf("the container is still starting after %s", containerStartTimeout)
	}
	if c.err != nil {
		return 0, fmt.Errorf("the container could not start: %w", c.err)
	}
	select {
	case <-c.exited:
		return 0, fmt.Errorf("the container is not running: its main process has exited")
	default:
		return c.pid, nil
	}
}

// stoppedContainer stands for a container that will not run; err says why an exec cannot.
func stoppedContainer(err error) *container {
	c := &container{ready: make(chan struct{}), exited: make(chan struct{}), err: err}
	close(c.ready)
	close(c.exited)
	return c
}

// kill ends the main process and the sandbox's PID 1, when it is known; the kernel then
// kills every process in the PID namespace, execs included. Killing bubblewrap alone is not
// enough: --die-with-parent takes the sandbox's PID 1 with it only once that child has set
// it up, so a kill while the sandbox is starting can leave the PID 1 (and its command)
// behind. The reconcile loop kills such a PID 1 when it was not known yet (reconcile.go).
func (c *container) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.Process == nil || c.killed {
		return
	}
	c.killed = true
	select {
	case <-c.exited: // reaped: its PID (and the sandbox's) may belong to another process now
		return
	default:
	}
	select {
	case <-c.ready:
		if c.pid > 0 {
			_ = syscall.Kill(c.pid, syscall.SIGKILL)
		}
	default:
	}
	_ = c.proc.Process.Signal(syscall.SIGKILL)
}

// exitCodeOf is a process's exit status as a container runtime reports it.
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// terminate asks every process of the container to stop (SIGTERM to each process in its
// PID namespace but the namespace's init, which then exits with the command), and kills it
// when it has not ended within grace: the kubelet's graceful stop.
func (c *container) terminate(grace time.Duration) {
	select {
	case <-c.ready:
	case <-c.exited:
	}
	if c.err == nil && c.pid > 0 {
		signalPidNamespace(c.pid, syscall.SIGTERM)
	}
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.kill()
		<-c.exited
	}
}

// signalPidNamespace sends sig to every process whose PID namespace is init's, init excepted.
func signalPidNamespace(init int, sig syscall.Signal) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == init {
			continue
		}
		if other, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && other == ns {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// nsenterArgs enters every namespace of the container's init, its root and the working
// directory, then drops all capabilities and sets no_new_privs (what bubblewrap does for
// the main process), so an exec runs with exactly the main process's privileges.
func nsenterArgs(pid int, workDir, setpriv string, cmd []string) []string {
	args := []string{"--target", fmt.Sprint(pid), "--mount", "--pid", "--ipc", "--uts", "--net", "--root", "--wdns=" + workDir,
		"--", setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"}
	return append(args, cmd...)
}

// discardOnError forwards writes until the first failure (the client's stream is gone),
// then swallows them: the command keeps running with its output drained, as a container
// runtime keeps serving an exec's pipes after its client left.
type discardOnError struct {
	w      io.Writer
	mu     sync.Mutex
	broken bool
}

func (d *discardOnError) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.broken {
		if _, err := d.w.Write(p); err != nil {
			d.broken = true
		}
	}
	return len(p), nil
}
