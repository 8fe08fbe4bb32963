package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

// handlePortForward serves /portForward/{ns}/{pod}[/{uid}], which the API server proxies
// `kubectl port-forward` to (SPDY from the API server, which translates kubectl's websocket
// itself; websocket from a direct client such as client-node). A pod on a real node is
// reached in its pod network namespace; a sandbox (kwok-played) pod in the network namespace
// of its container's sandbox (bubblewrap --unshare-net: loopback only, see pods.go).
func (s *server) handlePortForward(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(req.URL.Path, "/portForward/"), "/"), "/")
	if len(parts) < 2 || len(parts) > 3 {
		http.Error(w, "expected /portForward/{namespace}/{pod}", http.StatusNotFound)
		return
	}
	pod, err := s.client.CoreV1().Pods(parts[0]).Get(req.Context(), parts[1], metav1.GetOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	var fwd portforward.PortForwarder = sandboxForwarder{pods: s.pods, pod: pod}
	if s.real.owns(pod) {
		fwd = podForwarder{s.real}
	} else if len(pod.Spec.Containers) == 0 {
		writeAPIError(w, apierrors.NewBadRequest(fmt.Sprintf("pod %s/%s has no container to forward into", pod.Namespace, pod.Name)))
		return
	}
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, req, fwd, pod.Name, pod.UID, opts,
		4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

type podForwarder struct{ r *realPods }

// PortForward connects the stream to 127.0.0.1:port inside the pod's network namespace,
// as a container runtime does.
func (f podForwarder) PortForward(_ context.Context, name string, uid types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	p := f.r.get(uid)
	if p == nil {
		return fmt.Errorf("pod %s (%s) is not running on this kubelet", name, uid)
	}
	p.mu.Lock()
	ns := p.netns
	p.mu.Unlock()
	if ns == nil {
		return fmt.Errorf("pod %s has no network namespace (yet)", name)
	}
	conn, err := ns.dialInPod(port)
	if err != nil {
		return fmt.Errorf("pod %s port %d: %w", name, port, err)
	}
	relay(stream, conn)
	return nil
}

// sandboxForwarder forwards into a sandbox pod: the network namespace of its first
// container's sandbox PID 1 (the pod's sandbox container; its others share nothing here).
type sandboxForwarder struct {
	pods *podDirs
	pod  *corev1.Pod
}

func (f sandboxForwarder) PortForward(_ context.Context, name string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	pid, err := f.pods.container(f.pod, &f.pod.Spec.Containers[0]).running()
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", pid)
	// the rule the relay lives by: a sandbox sharing the kubelet's network namespace would
	// make 127.0.0.1 the host's, so such a forward is refused rather than made
	if own, err := sameNetns(nsPath, "/proc/self/ns/net"); err != nil || own {
		return fmt.Errorf("pod %s: refusing to forward: its sandbox has no network namespace of its own (%v)", name, err)
	}
	conn, err := dialLoopbackIn(nsPath, port)
	if err != nil {
		return fmt.Errorf("pod %s port %d: %w", name, port, err)
	}
	relayUntilEither(stream, conn)
	return nil
}

// relayUntilEither copies both ways and ends the forward when either direction is done, as
// containerd's port-forward does: the websocket stream has no half-close, so waiting for the
// client's direction after the server closed would hold the connection open forever.
func relayUntilEither(stream io.ReadWriteCloser, conn net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst io.Writer, src io.Reader) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(stream, conn)
	go cp(conn, stream)
	<-done
	_ = conn.Close()
	_ = stream.Close()
}

func sameNetns(a, b string) (bool, error) {
	la, err := os.Readlink(a)
	if err != nil {
		return false, err
	}
	lb, err := os.Readlink(b)
	if err != nil {
		return false, err
	}
	return la == lb, nil
}

// dialLoopbackIn connects to port on the loopback of the network namespace at nsPath:
// 127.0.0.1 first, then ::1 when nothing listens on IPv4 (a server bound to ::1 only), as
// the local platform's helper relay does.
func dialLoopbackIn(nsPath string, port int32) (net.Conn, error) {
	var c net.Conn
	err := inNetns(nsPath, func() (err error) {
		c, err = net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if errors.Is(err, syscall.ECONNREFUSED) {
			if c6, err6 := net.Dial("tcp6", fmt.Sprintf("[::1]:%d", port)); err6 == nil {
				c, err = c6, nil
			}
		}
		return err
	})
	return c, err
}
