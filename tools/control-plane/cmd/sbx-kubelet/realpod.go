package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ctrState is what the status reports of one container, and its running instance.
type ctrState struct {
	spec     *corev1.Container
	cur      *container
	restarts int32
	state    corev1.ContainerState
	last     corev1.ContainerState
	ready    bool
	started  bool
}

type realPod struct {
	r      *realPods
	uid    types.UID
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	dirty  chan struct{}

	mu          sync.Mutex
	pod         *corev1.Pod
	deleteAPI   bool // delete the object once stopped (a deletionTimestamp was seen)
	ip          net.IP
	netns       *podNetns
	initialized bool
	startTime   metav1.Time
	init        []*ctrState
	main        []*ctrState
}

func newRealPod(r *realPods, pod *corev1.Pod) *realPod {
	ctx, cancel := context.WithCancel(context.Background())
	p := &realPod{r: r, uid: pod.UID, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		dirty: make(chan struct{}, 1), pod: pod, startTime: metav1.Now()}
	if pod.Status.StartTime != nil {
		p.startTime = *pod.Status.StartTime
	}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	for i := range pod.Spec.InitContainers {
		p.init = append(p.init, &ctrState{spec: &pod.Spec.InitContainers[i], state: waiting("PodInitializing")})
	}
	first := "ContainerCreating"
	if len(p.init) > 0 {
		first = "PodInitializing"
	}
	for i := range pod.Spec.Containers {
		p.main = append(p.main, &ctrState{spec: &pod.Spec.Containers[i], state: waiting(first)})
	}
	return p
}

func (p *realPod) update(pod *corev1.Pod) {
	p.mu.Lock()
	p.pod = pod
	p.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		p.stop(true)
	}
}

func (p *realPod) stop(deleteAPI bool) {
	p.mu.Lock()
	p.deleteAPI = p.deleteAPI || deleteAPI
	p.mu.Unlock()
	p.cancel()
}

func (p *realPod) markDirty() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

func (p *realPod) spec() *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pod
}

// sleep waits d unless the pod is being stopped; false means stop.
func (p *realPod) sleep(d time.Duration) bool {
	select {
	case <-p.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// grace is how long a stopping container gets between SIGTERM and SIGKILL.
func (p *realPod) grace() time.Duration {
	pod := p.spec()
	secs := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		secs = *pod.DeletionGracePeriodSeconds
	}
	return min(time.Duration(secs)*time.Second, maxStopGrace)
}

// run is the pod's whole life: network and volumes, init containers in order, then the
// main containers under their supervisors until the pod is deleted; then the clean-up.
func (p *realPod) run() {
	defer close(p.done)
	go p.statusLoop()
	if p.prepare() && p.runInit() {
		var wg sync.WaitGroup
		for _, cs := range p.main {
			wg.Add(1)
			go func() { defer wg.Done(); p.supervise(cs) }()
		}
		wg.Wait()
	}
	<-p.ctx.Done()
	p.cleanup()
}

// prepare sets up the network namespace and materializes the volumes, retrying (as the
// kubelet does with a missing ConfigMap) until it works or the pod is deleted.
func (p *realPod) prepare() bool {
	backoff := restartBackoffStart
	for p.ctx.Err() == nil {
		err := p.prepareOnce()
		if err == nil {
			return true
		}
		p.mu.Lock()
		for _, cs := range append(append([]*ctrState{}, p.init...), p.main...) {
			cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}}
		}
		p.mu.Unlock()
		p.markDirty()
		p.r.dirs.appendLog(p.uid, p.main[0].spec.Name, fmt.Sprintf("sbx-kubelet: pod not started yet: %v\n", err))
		if !p.sleep(backoff) {
			return false
		}
		backoff = min(2*backoff, restartBackoffMax)
	}
	return false
}

func (p *realPod) prepareOnce() error {
	pod := p.spec()
	dir, err := p.r.dirs.ensure(pod)
	if err != nil {
		return err
	}
	if p.ip == nil {
		if pod.Spec.HostNetwork {
			p.ip = net.ParseIP(p.r.cfg.hostIP)
		} else {
			ip, err := p.r.cfg.net.allocate(pod.Status.PodIP)
			if err != nil {
				return err
			}
			ns, err := p.r.cfg.net.setup(string(pod.UID), ip)
			if err != nil {
				p.r.cfg.net.release(ip)
				return err
			}
			p.mu.Lock()
			p.ip, p.netns = ip, ns
			p.mu.Unlock()
		}
		p.markDirty()
	}
	return p.envSource(p.ctx).materializeVolumes(dir)
}

func (p *realPod) envSource(ctx context.Context) *envSource {
	return &envSource{ctx: ctx, client: p.r.client, pod: p.spec(), podIP: p.ip.String(), hostIP: p.r.cfg.hostIP, apiPort: p.r.cfg.apiPort}
}

func (p *realPod) setState(cs *ctrState, st corev1.ContainerState) {
	p.mu.Lock()
	cs.state = st
	if st.Running == nil {
		cs.ready, cs.started = false, false
	}
	p.mu.Unlock()
	p.markDirty()
}

func (p *realPod) setRunning(cs *ctrState, inst *container) {
	p.mu.Lock()
	cs.cur = inst
	cs.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: inst.startedAt}}
	cs.started = cs.spec.StartupProbe == nil
	cs.ready = false
	p.mu.Unlock()
	p.markDirty()
}

func (p *realPod) setProbeResult(cs *ctrState, inst *container, started, ready *bool) {
	p.mu.Lock()
	if cs.cur == inst && cs.state.Running != nil {
		if started != nil {
			cs.started = *started
		}
		if ready != nil {
			cs.ready = *ready
		}
	}
	p.mu.Unlock()
	p.markDirty()
}

// current is the container's running instance, for exec.
func (p *realPod) current(name string) *container {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range append(append([]*ctrState{}, p.main...), p.init...) {
		if cs.spec.Name == name && cs.cur != nil {
			return cs.cur
		}
	}
	return nil
}

// cleanup runs once every container has stopped: the network namespace and address go,
// the pod's directory is removed, then the pod object is deleted (when that was asked for).
func (p *realPod) cleanup() {
	p.mu.Lock()
	ns, ip, deleteAPI, pod := p.netns, p.ip, p.deleteAPI, p.pod
	p.netns = nil
	p.mu.Unlock()
	if ns != nil {
		p.r.cfg.net.teardown(ns)
		p.r.cfg.net.release(ip)
	}
	_ = os.RemoveAll(p.r.dirs.dir(p.uid))
	p.r.mu.Lock()
	if p.r.pods[p.uid] == p {
		delete(p.r.pods, p.uid)
	}
	p.r.mu.Unlock()
	// last, as the kubelet does: once the object is gone, nothing of the pod is left
	if deleteAPI {
		p.r.deleteObject(pod)
	}
}
