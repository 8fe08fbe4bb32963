package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	streaming "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

type server struct {
	client  kubernetes.Interface
	real    *realPods
	pods    *podDirs
	nsenter string
	setpriv string
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:10250", "address to serve the kubelet API on (HTTPS)")
	cert := fs.String("tls-cert", "", "serving certificate (PEM)")
	key := fs.String("tls-key", "", "serving key (PEM)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig used to read pods")
	root := fs.String("root", "", "directory holding one directory per pod")
	bwrap := fs.String("bwrap", "/usr/bin/bwrap", "bubblewrap binary")
	nsenter := fs.String("nsenter", "/usr/bin/nsenter", "nsenter binary (util-linux): execs join the container's namespaces")
	setpriv := fs.String("setpriv", "/usr/bin/setpriv", "setpriv binary (util-linux): drops an exec's capabilities; run inside the container, so at the same path there")
	realNodes := fs.String("real-nodes", "", "comma-separated nodes whose pods this kubelet runs itself (kwok plays the others)")
	bridge := fs.String("pod-bridge", "", "host bridge of the real nodes' pod network (created by the test setup)")
	podCIDR := fs.String("pod-cidr", "", "the bridge's /24; the bridge holds .1, pods get .2-.254")
	loopback := fs.String("loopback-ports", "", "comma-separated host loopback ports every real pod sees on its own 127.0.0.1 (API server, registry)")
	sandboxLoopback := fs.String("sandbox-loopback-ports", "", "comma-separated host loopback ports every kwok-played pod also sees on its own 127.0.0.1 (the snapshot registry)")
	sandboxPodPorts := fs.String("sandbox-pod-ports", "", "comma-separated ports every kwok-played pod reaches on the real nodes' pods at their addresses (a layer registry the platform deploys)")
	apiPort := fs.Int("api-port", 0, "the API server's port, for KUBERNETES_SERVICE_PORT (forward it with --loopback-ports)")
	hostIP := fs.String("host-ip", "127.0.0.1", "status.hostIP of pods on the real nodes (the nodes' InternalIP)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cert == "" || *key == "" || *kubeconfig == "" || *root == "" {
		return errors.New("serve: --tls-cert, --tls-key, --kubeconfig and --root are required")
	}
	if _, err := os.Stat(*bwrap); err != nil {
		return fmt.Errorf("serve: bubblewrap not found at %s (install the Debian package bubblewrap): %w", *bwrap, err)
	}
	for _, tool := range []string{*nsenter, *setpriv} {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("serve: %s not found (install the Debian package util-linux): %w", tool, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("serve: reading kubeconfig %s: %w", *kubeconfig, err)
	}
	// a real kubelet's client limits (kubeAPIQPS 50, kubeAPIBurst 100), not client-go's 5/10:
	// every exec and port-forward reads its pod, so 5/s spaced relayed connections 200 ms apart
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s := &server{client: client, nsenter: *nsenter, setpriv: *setpriv, pods: newPodDirs(*root, *bwrap)}
	if s.pods.loopback, err = parsePorts("--sandbox-loopback-ports", *sandboxLoopback); err != nil {
		return err
	}
	if s.pods.podPorts, err = parsePorts("--sandbox-pod-ports", *sandboxPodPorts); err != nil {
		return err
	}
	if *realNodes != "" {
		real, err := newRealPods(client, s.pods, *realNodes, *bridge, *podCIDR, *loopback, *apiPort, *hostIP)
		if err != nil {
			return err
		}
		real.cfg.bwrap, real.cfg.nsenter, real.cfg.setpriv = *bwrap, *nsenter, *setpriv
		s.real, s.pods.real = real, real
	}
	go s.pods.watch(ctx, client)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/", s.handleExec)
	mux.HandleFunc("/containerLogs/", s.handleLogs)
	mux.HandleFunc("/portForward/", s.handlePortForward)
	srv := &http.Server{Addr: *listen, Handler: mux, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	go func() {
		<-ctx.Done()
		s.pods.stopAll()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintf(os.Stderr, "sbx-kubelet %s serving on https://%s, pods under %s\n", version, *listen, *root)
	if err := srv.ListenAndServeTLS(*cert, *key); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// podPath splits /exec/{ns}/{pod}/{container} and /exec/{ns}/{pod}/{uid}/{container}.
func podPath(prefix, p string) (ns, name, container string, ok bool) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(p, prefix), "/"), "/")
	switch len(parts) {
	case 3:
		return parts[0], parts[1], parts[2], true
	case 4:
		return parts[0], parts[1], parts[3], true
	}
	return "", "", "", false
}

// resolve reads the pod fresh from the API server (the watch may lag a just-started pod)
// and checks the container exists and is running, as the kubelet does before an exec.
func (s *server) resolve(ctx context.Context, ns, name, container string) (*corev1.Pod, *corev1.Container, error) {
	pod, err := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		for _, st := range pod.Status.ContainerStatuses {
			if st.Name == container && st.State.Terminated != nil {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("container %s in pod %s/%s is not running (terminated: %s, exit code %d)",
					container, ns, name, st.State.Terminated.Reason, st.State.Terminated.ExitCode))
			}
		}
		return pod, c, nil
	}
	return nil, nil, apierrors.NewNotFound(corev1.Resource("containers"), container)
}

// writeAPIError answers a request that cannot be served with a metav1.Status body: the
// API server's upgrade path decodes it and hands its message to the exec client.
func writeAPIError(w http.ResponseWriter, err error) {
	var api apierrors.APIStatus
	status := apierrors.NewInternalError(err).ErrStatus
	if errors.As(err, &api) && api.Status().Code != 0 {
		status = api.Status()
	}
	status.Kind, status.APIVersion = "Status", "v1"
	body, _ := json.Marshal(status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(body)
}

func (s *server) handleExec(w http.ResponseWriter, req *http.Request) {
	ns, name, container, ok := podPath("/exec/", req.URL.Path)
	if !ok {
		http.Error(w, "expected /exec/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	opts, err := streaming.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := req.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "exec needs at least one command parameter", http.StatusBadRequest)
		return
	}
	pod, c, err := s.resolve(req.Context(), ns, name, container)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	ex := &sandboxExec{s: s, pod: pod, container: c}
	streaming.ServeExec(w, req, ex, name, pod.UID, container, cmd, opts,
		4*time.Hour, 30*time.Second, remotecommandconsts.SupportedStreamingProtocols)
}

// sandboxExec runs one exec request in the namespaces of the pod's container.
type sandboxExec struct {
	s         *server
	pod       *corev1.Pod
	container *corev1.Container
}

// ExecInContainer runs cmd inside the container the way a container runtime does: it
// enters the namespaces of the container's main process, so it shares the container's
// processes, root and hostname. The command is not tied to the stream: a client that goes
// away leaves it running (its stdin ends, its output is drained and dropped), as the
// kubelet with containerd does; the stream's handler waits for it to exit.
func (e *sandboxExec) ExecInContainer(_ context.Context, _ string, _ types.UID, _ string, cmd []string,
	in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ctr := e.s.pods.container(e.pod, e.container)
	pid, err := ctr.running()
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("container %s in pod %s/%s: %v", e.container.Name, e.pod.Namespace, e.pod.Name, err))
	}
	proc := exec.Command(e.s.nsenter, nsenterArgs(pid, workDir(e.container), e.s.setpriv, cmd)...)
	proc.Env = ctr.env
	if proc.Env == nil {
		proc.Env = containerEnv(e.pod, e.container)
	}
	// Its own session, as a runtime's exec gets: otherwise the command would share the
	// kubelet's process group, and a `kill 0` inside the container would reach the kubelet.
	// (runTTY's pty.Start sets up a session with the terminal itself.)
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: !tty}
	if tty {
		return runTTY(proc, in, out, resize)
	}
	return runPiped(proc, in, out, errw)
}

// runPiped gives the command pipes we own rather than letting os/exec copy: Wait would
// otherwise block until the client closes stdin, even after the command has exited, and a
// failed write to a gone client would stop the copy and leave the command blocked on a
// full pipe.
func runPiped(proc *exec.Cmd, in io.Reader, out, errw io.WriteCloser) error {
	var copies sync.WaitGroup
	// the child's ends of the pipes: closed once it has them (or failed to start), so
	// the copies see EOF when the last holder exits
	var closeAfterStart []io.Closer
	closeChildEnds := func() {
		for _, c := range closeAfterStart {
			_ = c.Close()
		}
	}
	outputs := []struct {
		w   io.Writer
		set func(*os.File)
	}{
		{out, func(f *os.File) { proc.Stdout = f }},
		{errw, func(f *os.File) { proc.Stderr = f }},
	}
	for _, o := range outputs {
		if o.w == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		o.set(w)
		closeAfterStart = append(closeAfterStart, w)
		copies.Add(1)
		go func(dst io.Writer) {
			defer copies.Done()
			defer r.Close()
			_, _ = io.Copy(&discardOnError{w: dst}, r)
		}(o.w)
	}
	var stdin *os.File
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		proc.Stdin, stdin = r, w
		closeAfterStart = append(closeAfterStart, r)
	}
	err := proc.Start()
	closeChildEnds()
	if err != nil {
		if stdin != nil {
			stdin.Close()
		}
		copies.Wait()
		return err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	err = proc.Wait()
	// Deliver the output before the status; a background process still holding stdout must
	// not keep the exec open forever (its output is drained and dropped after that).
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return exitError(err)
}

func runTTY(proc *exec.Cmd, in io.Reader, out io.WriteCloser, resize <-chan remotecommand.TerminalSize) error {
	tty, err := pty.Start(proc)
	if err != nil {
		return err
	}
	go func() {
		for size := range resize {
			_ = pty.Setsize(tty, &pty.Winsize{Rows: size.Height, Cols: size.Width})
		}
	}()
	if in != nil {
		go func() { _, _ = io.Copy(tty, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer tty.Close() // the terminal stays open (drained) while anything holds it
		if out != nil {
			_, _ = io.Copy(&discardOnError{w: out}, tty) // ends with EIO once every holder of the terminal has exited
		} else {
			_, _ = io.Copy(io.Discard, tty)
		}
	}()
	err = exitError(proc.Wait())
	// Deliver the output before the status; a background process still holding the
	// terminal must not keep the exec open forever.
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return err
}

// exitError turns a non-zero exit into the error type the streaming library reports as
// NonZeroExitCode with the code as a cause, which is what clients read the exit code from.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 { // killed by a signal: report it the way a shell would
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}
