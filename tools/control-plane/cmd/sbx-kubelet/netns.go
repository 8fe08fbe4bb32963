package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// podNetwork is the network the test setup owns for pods on the real nodes: a host bridge
// (created by tools/control-plane/network.ts) whose /24 is private to this machine. Each
// pod gets a network namespace with a veth on that bridge; the host reaches the pod at its
// address (probes, the API server's pod proxy), and nothing routes further: the host does
// not forward, so a pod reaches the host and its fellow pods only.
type podNetwork struct {
	bridge  string
	prefix  net.IPNet // e.g. 10.244.200.0/24
	gateway net.IP    // the bridge's own address, .1
	// loopbackPorts are host loopback ports (API server, registry) that each pod sees on its
	// own 127.0.0.1, so clients configured with 127.0.0.1:port work inside a pod too.
	loopbackPorts []int
	mu            sync.Mutex
	used          map[string]bool
}

func newPodNetwork(bridge, cidr string, loopbackPorts []int) (*podNetwork, error) {
	ip, prefix, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("--pod-cidr %q must be an IPv4 CIDR such as 10.244.200.0/24", cidr)
	}
	if ones, _ := prefix.Mask.Size(); ones != 24 {
		return nil, fmt.Errorf("--pod-cidr %q must be a /24", cidr)
	}
	gw := append(net.IP{}, prefix.IP.To4()...)
	gw[3] = 1
	return &podNetwork{bridge: bridge, prefix: *prefix, gateway: gw, loopbackPorts: loopbackPorts, used: map[string]bool{}}, nil
}

// nsPrefix names every namespace of this bridge, so a restarted kubelet (or the setup after
// a crash) finds and removes the ones a previous instance left.
func (n *podNetwork) nsPrefix() string { return "sbx-" + n.bridge + "-" }

// reapStale deletes namespaces a previous kubelet on this bridge left behind (their
// processes died with it: every main process has the kubelet as its death signal).
func (n *podNetwork) reapStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], n.nsPrefix()) {
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// allocate picks the pod's address: the one it had (status.podIP, after a kubelet
// restart) when that is in the range and free, else the lowest free one.
func (n *podNetwork) allocate(previous string) (net.IP, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ip := net.ParseIP(previous).To4(); ip != nil && n.prefix.Contains(ip) && ip[3] > 1 && ip[3] < 255 && !n.used[ip.String()] {
		n.used[ip.String()] = true
		return ip, nil
	}
	for i := 2; i < 255; i++ {
		ip := append(net.IP{}, n.prefix.IP.To4()...)
		ip[3] = byte(i)
		if !n.used[ip.String()] {
			n.used[ip.String()] = true
			return ip, nil
		}
	}
	return nil, fmt.Errorf("no free pod address left in %s (253 pods on the real nodes at once)", n.prefix.String())
}

func (n *podNetwork) release(ip net.IP) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.used, ip.String())
}

// podNetns is one pod's network namespace.
type podNetns struct {
	name string // under /run/netns
	veth string // host end, on the bridge
	ip   net.IP
	mu   sync.Mutex
	// listeners are the loopback forwarders inside the namespace.
	listeners []net.Listener
}

func (p *podNetns) path() string { return "/run/netns/" + p.name }

// setup creates the namespace, its veth pair (eth0 inside) and its routes, then starts the
// loopback forwarders. A half-built namespace is removed again.
func (n *podNetwork) setup(uid string, ip net.IP) (*podNetns, error) {
	sum := sha256.Sum256([]byte(uid))
	p := &podNetns{name: n.nsPrefix() + uid, veth: "sv" + hex.EncodeToString(sum[:])[:12], ip: ip}
	_ = exec.Command("ip", "netns", "del", p.name).Run() // a leftover of a crashed kubelet
	_ = exec.Command("ip", "link", "del", p.veth).Run()
	steps := [][]string{
		{"netns", "add", p.name},
		{"link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.name},
		{"link", "set", p.veth, "master", n.bridge, "up"},
		{"-n", p.name, "addr", "add", ip.String() + "/24", "dev", "eth0"},
		{"-n", p.name, "link", "set", "lo", "up"},
		{"-n", p.name, "link", "set", "eth0", "up"},
		{"-n", p.name, "route", "add", "default", "via", n.gateway.String()},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			n.teardown(p)
			return nil, fmt.Errorf("pod network: ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	for _, port := range n.loopbackPorts {
		if err := p.forwardLoopback(port); err != nil {
			n.teardown(p)
			return nil, err
		}
	}
	return p, nil
}

// teardown stops the forwarders and deletes the namespace; the veth pair goes with it.
func (n *podNetwork) teardown(p *podNetns) {
	p.mu.Lock()
	for _, l := range p.listeners {
		_ = l.Close()
	}
	p.listeners = nil
	p.mu.Unlock()
	// The veth first: deleting it removes both ends at once, while a deleted namespace's
	// devices go later, in the kernel's background clean-up.
	_ = exec.Command("ip", "link", "del", p.veth).Run()
	_ = exec.Command("ip", "netns", "del", p.name).Run()
}

// inNetns runs fn on an OS thread that has joined the namespace at path, then moves the
// thread back to the host's namespace and unlocks it. Sockets created by fn stay in the pod's
// namespace wherever they are used.
//
// Why not leave the thread locked and let Go discard it: a discarded thread is any thread the
// scheduler picked, possibly one that earlier forked a container's bubblewrap, whose
// Pdeathsig (SIGKILL on the death of the forking thread) then kills that container; the
// likely cause of the deployed manager dying (exit 137) as a port-forward to it began
// (docs/deploy.md, findings). Only when moving back fails is
// the thread left locked and discarded, since it must never run anything else.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer host.Close()
		f, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("joining network namespace %s: %w", path, err)
			return
		}
		err = fn()
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// forwardLoopback listens on 127.0.0.1:port inside the pod and relays every connection to
// the host's 127.0.0.1:port.
func (p *podNetns) forwardLoopback(port int) error {
	l, err := listenLoopbackIn(p.path(), port)
	if err != nil {
		return fmt.Errorf("pod network: forwarding host port %d into %s: %w", port, p.name, err)
	}
	p.mu.Lock()
	p.listeners = append(p.listeners, l)
	p.mu.Unlock()
	go serveLoopbackForward(l, port)
	return nil
}

// listenLoopbackIn listens on 127.0.0.1:port inside the network namespace at nsPath.
func listenLoopbackIn(nsPath string, port int) (net.Listener, error) {
	var l net.Listener
	err := inNetns(nsPath, func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	})
	return l, err
}

// reachPodsFrom lets a loopback-only namespace (a kwok-played sandbox's) reach the real
// nodes' pods on ports, at their own addresses: the pod network's /24 becomes local there
// (`ip route add local`), a listener on 0.0.0.0:<port> inside takes what is sent to any of
// its addresses, and each connection is dialed from the host, which reaches every pod, to
// the address it was sent to. What goes to another address (its own 127.0.0.1) is closed.
func (n *podNetwork) reachPodsFrom(nsPath, nsenter string, ports []int) ([]net.Listener, error) {
	out, err := exec.Command(nsenter, "--net="+nsPath, "ip", "route", "add", "local", n.prefix.String(), "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		return nil, fmt.Errorf("ip route add local %s: %v: %s", n.prefix.String(), err, strings.TrimSpace(string(out)))
	}
	var listeners []net.Listener
	for _, port := range ports {
		var l net.Listener
		if err := inNetns(nsPath, func() (err error) {
			l, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
			return err
		}); err != nil {
			return listeners, err
		}
		listeners = append(listeners, l)
		go n.servePodForward(l, port)
	}
	return listeners, nil
}

func (n *podNetwork) servePodForward(l net.Listener, port int) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return // closed by teardown
		}
		go func() {
			dst, ok := conn.LocalAddr().(*net.TCPAddr)
			if !ok || !n.prefix.Contains(dst.IP) || dst.IP.Equal(n.gateway) {
				_ = conn.Close()
				return
			}
			up, err := net.Dial("tcp4", net.JoinHostPort(dst.IP.String(), strconv.Itoa(port)))
			if err != nil {
				_ = conn.Close()
				return
			}
			relay(conn, up)
		}()
	}
}

// serveLoopbackForward relays every connection accepted on l (a pod's loopback) to the same
// port on the host's loopback, until l is closed.
func serveLoopbackForward(l net.Listener, port int) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return // closed by teardown
		}
		go func() {
			up, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				_ = conn.Close()
				return
			}
			relay(conn, up)
		}()
	}
}

// dialInPod connects to 127.0.0.1:port inside the pod, as a container runtime's port
// forwarding does (so a server bound to the pod's loopback is reachable too).
func (p *podNetns) dialInPod(port int32) (net.Conn, error) {
	var c net.Conn
	err := inNetns(p.path(), func() (err error) {
		c, err = net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	})
	return c, err
}

// relay copies both ways. When one side stops sending, the other side's write half is
// closed (so an HTTP client's half-close or a server's end of response passes through),
// and both are closed once both directions are done.
func relay(a, b io.ReadWriteCloser) {
	var wg sync.WaitGroup
	cp := func(dst, src io.ReadWriteCloser) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if hc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = hc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
