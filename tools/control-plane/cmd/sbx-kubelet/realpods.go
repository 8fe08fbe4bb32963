package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Pods on the real nodes (--real-nodes: the untainted system node, where the runtime's own
// Deployments land) are run by this kubelet from start to end, and kwok's Stages leave them
// alone (kwok-stages.yaml selects on spec.nodeName). Sandbox pods stay kwok-played.

// Restart back-off: the kubelet's is 10 s doubling to 5 min; shorter here so a test sees a
// restart in seconds. Reset once a container has run for restartResetAfter.
const (
	restartBackoffStart = 500 * time.Millisecond
	restartBackoffMax   = 20 * time.Second
	restartResetAfter   = time.Minute
	// maxStopGrace caps terminationGracePeriodSeconds: a test's teardown must not wait 30 s.
	maxStopGrace = 10 * time.Second
)

type realConfig struct {
	nodes   map[string]bool
	net     *podNetwork
	hostIP  string
	apiPort int
	bwrap   string
	nsenter string
	setpriv string
}

// realPods owns the pods on the real nodes, one realPod (and goroutine) per pod UID.
type realPods struct {
	client kubernetes.Interface
	cfg    realConfig
	dirs   *podDirs
	mu     sync.Mutex
	pods   map[types.UID]*realPod
}

func (r *realPods) owns(pod *corev1.Pod) bool { return r != nil && r.cfg.nodes[pod.Spec.NodeName] }

// sync starts a pod seen for the first time and passes every later version on; a
// deletionTimestamp stops it gracefully.
func (r *realPods) sync(pod *corev1.Pod) {
	r.mu.Lock()
	p := r.pods[pod.UID]
	if p == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
		// finished under an earlier kubelet: never run again, only deleted when asked
		r.mu.Unlock()
		if pod.DeletionTimestamp != nil {
			r.deleteObject(pod)
		}
		return
	}
	if p == nil {
		p = newRealPod(r, pod)
		r.pods[pod.UID] = p
		go p.run()
	}
	r.mu.Unlock()
	p.update(pod)
}

// gone is the informer's delete: the object no longer exists (force-deleted, or deleted by
// us after stopping), so only the local clean-up remains.
func (r *realPods) gone(uid types.UID) {
	r.mu.Lock()
	p := r.pods[uid]
	r.mu.Unlock()
	if p != nil {
		p.stop(false)
	}
}

// deleteObject removes a stopped pod's object, as the kubelet does once its containers are
// gone (grace 0, only that incarnation of the name).
func (r *realPods) deleteObject(pod *corev1.Pod) {
	zero := int64(0)
	uid := pod.UID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
}

func (r *realPods) get(uid types.UID) *realPod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pods[uid]
}

// shutdown stops every pod's processes and network at once (kubelet exit), leaving the pod
// objects to the next kubelet.
func (r *realPods) shutdown() {
	r.mu.Lock()
	pods := make([]*realPod, 0, len(r.pods))
	for _, p := range r.pods {
		pods = append(pods, p)
	}
	r.mu.Unlock()
	for _, p := range pods {
		p.stop(false)
	}
	for _, p := range pods {
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
	}
}

func newRealPods(client kubernetes.Interface, dirs *podDirs, nodes, bridge, cidr, loopback string, apiPort int, hostIP string) (*realPods, error) {
	if bridge == "" || cidr == "" {
		return nil, fmt.Errorf("serve: --real-nodes needs --pod-bridge and --pod-cidr (the test setup's pod network)")
	}
	ports, err := parsePorts("--loopback-ports", loopback)
	if err != nil {
		return nil, err
	}
	pn, err := newPodNetwork(bridge, cidr, ports)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	pn.reapStale()
	cfg := realConfig{nodes: map[string]bool{}, net: pn, hostIP: hostIP, apiPort: apiPort}
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.nodes[n] = true
		}
	}
	return &realPods{client: client, cfg: cfg, dirs: dirs, pods: map[types.UID]*realPod{}}, nil
}

// parsePorts reads a comma-separated list of port numbers (flag names the flag in errors).
func parsePorts(flag, list string) ([]int, error) {
	var ports []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("serve: %s entry %q is not a port number", flag, f)
		}
		ports = append(ports, n)
	}
	return ports, nil
}
