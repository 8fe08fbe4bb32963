package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podDirs owns the per-pod directories and the containers' main processes. A pod's
// directory is created on first use (exec or start) and removed when the pod is deleted,
// so one pod's files never outlive it or leak into a pod that reuses its name.
type podDirs struct {
	root  string
	bwrap string
	mu    sync.Mutex
	// main holds each started container (its main process), keyed by pod UID; refs names
	// their pods, for reconcile's check against the API server (reconcile.go).
	main map[types.UID]map[string]*container
	refs map[types.UID]podRef
	// gone holds the UIDs of deleted pods and when the delete was seen: no container of
	// theirs is ever started again (an exec that read the pod just before its delete would).
	gone map[types.UID]time.Time
	// kick asks the reconcile loop for a round now.
	kick chan struct{}
	// real runs the pods on the real nodes (nil: every pod is kwok-played).
	real *realPods
	// loopback: host loopback ports each kwok-played container also sees on its own
	// 127.0.0.1 (the snapshot registry: a sandbox pod moves its own snapshot layers, the test
	// cluster's stand-in for a NetworkPolicy that lets sandboxes reach the registry alone).
	loopback []int
	// podPorts: ports kwok-played containers reach on the real nodes' pods, at those pods' own
	// addresses (--sandbox-pod-ports; the layer registry a platform deploys): the test
	// cluster's stand-in for pod-to-pod traffic that a NetworkPolicy admits by label.
	podPorts []int
}

func newPodDirs(root, bwrap string) *podDirs {
	return &podDirs{root: root, bwrap: bwrap, main: map[types.UID]map[string]*container{},
		refs: map[types.UID]podRef{}, gone: map[types.UID]time.Time{}, kick: make(chan struct{}, 1)}
}

func (d *podDirs) dir(uid types.UID) string { return filepath.Join(d.root, string(uid)) }

func (d *podDirs) logPath(uid types.UID, container string) string {
	return filepath.Join(d.dir(uid), "logs", container+".log")
}

func (d *podDirs) ensure(pod *corev1.Pod) (string, error) {
	dir := d.dir(pod.UID)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return "", fmt.Errorf("creating pod directory for %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return dir, nil
}

// watch follows every scheduled pod: it starts a container's main process once the
// simulated kubelet (kwok) reports the container running, and cleans up on deletion; the
// reconcile loop catches what the events miss.
func (d *podDirs) watch(ctx context.Context, client kubernetes.Interface) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.sync(obj) },
		UpdateFunc: func(_, obj any) { d.sync(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				if d.real.owns(pod) {
					d.real.gone(pod.UID)
				} else {
					d.remove(pod.UID)
				}
			}
			d.kickReconcile()
		},
	})
	factory.Start(ctx.Done())
	d.reconcileLoop(ctx, client, inf.GetStore())
}

func (d *podDirs) sync(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if ok && d.real.owns(pod) {
		d.real.sync(pod)
		return
	}
	if !ok || pod.DeletionTimestamp != nil {
		return
	}
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Terminated != nil {
			d.stopMain(pod.UID, st.Name) // e.g. a test marked it OOMKilled: its process is gone too
			continue
		}
		if st.State.Running == nil {
			continue
		}
		for i := range pod.Spec.Containers {
			if c := &pod.Spec.Containers[i]; c.Name == st.Name {
				d.container(pod, c)
			}
		}
	}
}

// container returns the pod's container, starting its main process on first use: when
// kwok reports it running, or at the first exec if that comes earlier. The command runs with
// stdout and stderr going to the container log (the image is ignored: the host's tools serve
// every image). A container is started once; after it ends it is not restarted.
func (d *podDirs) container(pod *corev1.Pod, c *corev1.Container) *container {
	if d.real.owns(pod) {
		return d.realContainer(pod, c.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.gone[pod.UID].IsZero() {
		return stoppedContainer(fmt.Errorf("pod %s/%s was deleted", pod.Namespace, pod.Name))
	}
	if d.main[pod.UID] == nil {
		d.main[pod.UID] = map[string]*container{}
	}
	if ctr, started := d.main[pod.UID][c.Name]; started {
		return ctr
	}
	d.refs[pod.UID] = podRef{uid: pod.UID, namespace: pod.Namespace, name: pod.Name}
	ctr, err := d.startMain(pod, c)
	if err != nil {
		d.appendLog(pod.UID, c.Name, fmt.Sprintf("sbx-kubelet: cannot start container: %v\n", err))
		ctr = stoppedContainer(err)
	}
	d.main[pod.UID][c.Name] = ctr
	return ctr
}

func (d *podDirs) startMain(pod *corev1.Pod, c *corev1.Container) (*container, error) {
	dir, err := d.ensure(pod)
	if err != nil {
		return nil, err
	}
	cmd := append(append([]string{}, c.Command...), c.Args...)
	if len(c.Command) == 0 {
		cmd = holdCommand // image entrypoint unknown here: the container idles with an empty log
	}
	mounts, err := planMounts(pod, c, dir, false)
	if err != nil {
		return nil, err
	}
	args, err := bwrapArgs(pod, c, mounts, containerEnv(pod, c), withReadyShim(cmd))
	if err != nil {
		return nil, err
	}
	// Its own network namespace (loopback only), as a pod's sandbox has on a real node: the
	// port-forward into it (portforward.go) must reach the sandbox's ports, never the host's.
	args = append([]string{"--unshare-net"}, args...)
	log, err := os.OpenFile(d.logPath(pod.UID, c.Name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	ctr := startContainer(nil, d.bwrap, args, log)
	go func() { <-ctr.exited; log.Close() }()
	if len(d.loopback) > 0 || len(d.podPorts) > 0 {
		go d.forwardInto(pod, c.Name, ctr)
	}
	return ctr, nil
}

// realContainer is the running instance of a container of a pod on a real node, or a
// stand-in that says why an exec cannot run (the kubelet's own pod worker starts it).
// forwardInto serves d.loopback on the loopback of the container's network namespace while
// its main process runs (execs join that namespace, so they reach the ports too).
func (d *podDirs) forwardInto(pod *corev1.Pod, name string, ctr *container) {
	<-ctr.ready
	if ctr.err != nil {
		return
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", ctr.pid)
	var listeners []net.Listener
	for _, port := range d.loopback {
		l, err := listenLoopbackIn(nsPath, port)
		if err != nil {
			select {
			case <-ctr.exited: // it ended before the forward was up: nothing to serve
			default:
				// our stderr, not the container's log, which tests and users read as the program's own
				fmt.Fprintf(os.Stderr, "sbx-kubelet: pod %s/%s container %s: forwarding host port %d: %v\n",
					pod.Namespace, pod.Name, name, port, err)
			}
			continue
		}
		listeners = append(listeners, l)
		go serveLoopbackForward(l, port)
	}
	if len(d.podPorts) > 0 && d.real != nil {
		ls, err := d.real.cfg.net.reachPodsFrom(nsPath, d.real.cfg.nsenter, d.podPorts)
		if err != nil {
			select {
			case <-ctr.exited:
			default:
				fmt.Fprintf(os.Stderr, "sbx-kubelet: pod %s/%s container %s: reaching pod ports %v: %v\n",
					pod.Namespace, pod.Name, name, d.podPorts, err)
			}
		}
		listeners = append(listeners, ls...)
	}
	<-ctr.exited
	for _, l := range listeners {
		_ = l.Close()
	}
}

func (d *podDirs) realContainer(pod *corev1.Pod, name string) *container {
	if p := d.real.get(pod.UID); p != nil {
		if ctr := p.current(name); ctr != nil {
			return ctr
		}
	}
	return stoppedContainer(fmt.Errorf("container %q has not started yet", name))
}

func (d *podDirs) stopMain(uid types.UID, container string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ctr := d.main[uid][container]; ctr != nil {
		ctr.kill() // stays "started": a terminated container is not restarted
	}
}

func (d *podDirs) appendLog(uid types.UID, container, line string) {
	if err := os.MkdirAll(filepath.Dir(d.logPath(uid, container)), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(d.logPath(uid, container), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}

// remove stops a deleted pod's containers and removes its directory. The tombstone is set
// under the same lock as the map is read, so no container of the pod starts after this.
func (d *podDirs) remove(uid types.UID) {
	d.mu.Lock()
	procs := d.main[uid]
	delete(d.main, uid)
	delete(d.refs, uid)
	if d.gone[uid].IsZero() {
		d.gone[uid] = time.Now()
	}
	d.mu.Unlock()
	for _, ctr := range procs {
		ctr.kill()
	}
	_ = os.RemoveAll(d.dir(uid))
}

// stopAll is the kubelet's exit: the sandbox pods' containers are killed at once (so the
// real pods' graceful stops, which can take seconds, cannot delay them past the caller's
// patience), then the real pods stop, then every process left under the pods' directories
// is killed, whoever started it.
func (d *podDirs) stopAll() {
	d.mu.Lock()
	for uid, procs := range d.main {
		for _, ctr := range procs {
			ctr.kill()
		}
		delete(d.main, uid)
		delete(d.refs, uid)
	}
	d.mu.Unlock()
	if d.real != nil {
		d.real.shutdown()
	}
	d.sweep(2 * time.Second)
}

// waitForFile is used by log following: it gives a just-started container a moment to
// create its log before reporting it empty.
func waitForFile(path string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
