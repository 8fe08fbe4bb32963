package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

// handlePortForward serves /portForward/{ns}/{pod}[/{uid}], which the API server proxies
// `kubectl port-forward` to (SPDY from the API server, which translates kubectl's websocket
// itself; websocket from a direct client). Only pods on the real nodes have a network to
// forward into: a sandbox (kwok-played) pod's port is refused.
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
	if s.real == nil {
		writeAPIError(w, apierrors.NewBadRequest("port-forward needs sbx-kubelet serve --real-nodes (no node runs pods for real)"))
		return
	}
	if !s.real.owns(pod) {
		writeAPIError(w, apierrors.NewBadRequest(fmt.Sprintf(
			"pod %s/%s runs on a simulated sandbox node (%s), which has no pod network; port-forward reaches pods on %v only",
			pod.Namespace, pod.Name, pod.Spec.NodeName, keys(s.real.cfg.nodes))))
		return
	}
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, req, podForwarder{s.real}, pod.Name, pod.UID, opts,
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

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
