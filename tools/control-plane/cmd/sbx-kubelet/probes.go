package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs the container's startup, readiness and liveness probes as the kubelet does:
// from the host, against the pod's address (exec probes inside the container). Readiness
// gates Ready; failureThreshold liveness failures (or startup failures) stop the container,
// and its supervisor restarts it. Ends with ctx (the container exited or the pod stops).
func (p *realPod) probe(ctx context.Context, cs *ctrState, inst *container) {
	c := cs.spec
	yes, no := true, false
	if c.StartupProbe != nil {
		passed := make(chan bool, 1)
		go p.every(ctx, c, inst, c.StartupProbe, func(ok bool) bool { passed <- ok; return false })
		select {
		case <-ctx.Done():
			return
		case ok := <-passed:
			if !ok {
				go inst.terminate(p.grace())
				return
			}
			p.setProbeResult(cs, inst, &yes, nil)
		}
	}
	if c.ReadinessProbe == nil {
		p.setProbeResult(cs, inst, nil, &yes)
	} else {
		go p.every(ctx, c, inst, c.ReadinessProbe, func(ok bool) bool {
			if ok {
				p.setProbeResult(cs, inst, nil, &yes)
			} else {
				p.setProbeResult(cs, inst, nil, &no)
			}
			return true
		})
	}
	if c.LivenessProbe != nil {
		go p.every(ctx, c, inst, c.LivenessProbe, func(ok bool) bool {
			if !ok {
				p.r.dirs.appendLog(p.uid, c.Name, "sbx-kubelet: liveness probe failed; restarting the container\n")
				go inst.terminate(p.grace())
				return false
			}
			return true
		})
	}
}

// every runs pr each periodSeconds after initialDelaySeconds and calls report when a run
// of results reaches its threshold (successThreshold successes, failureThreshold
// failures); report answers whether to keep probing.
func (p *realPod) every(ctx context.Context, c *corev1.Container, inst *container, pr *corev1.Probe, report func(bool) bool) {
	period := seconds(pr.PeriodSeconds, 10)
	wait := seconds(pr.InitialDelaySeconds, 0)
	needOK, needFail := int(max(pr.SuccessThreshold, 1)), int(max(pr.FailureThreshold, 1))
	if pr.FailureThreshold == 0 {
		needFail = 3
	}
	oks, fails := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = period
		if p.check(ctx, c, inst, pr) {
			oks, fails = oks+1, 0
			if oks == needOK && !report(true) {
				return
			}
		} else {
			oks, fails = 0, fails+1
			if fails == needFail && !report(false) {
				return
			}
		}
	}
}

func seconds(n int32, def int32) time.Duration {
	if n <= 0 {
		n = def
	}
	return time.Duration(n) * time.Second
}

// probeClient does not follow redirects: a 3xx is a success, as for the kubelet.
var probeClient = &http.Client{
	Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// check runs one probe; a failure is noted in the container log for whoever debugs it.
func (p *realPod) check(ctx context.Context, c *corev1.Container, inst *container, pr *corev1.Probe) bool {
	timeout := seconds(pr.TimeoutSeconds, 1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.checkOnce(ctx, c, inst, pr)
	if err != nil && ctx.Err() != context.Canceled {
		p.r.dirs.appendLog(p.uid, c.Name, fmt.Sprintf("sbx-kubelet: probe failed: %v\n", err))
	}
	return err == nil
}

func (p *realPod) checkOnce(ctx context.Context, c *corev1.Container, inst *container, pr *corev1.Probe) error {
	host := p.ip.String()
	switch {
	case pr.HTTPGet != nil:
		g := pr.HTTPGet
		port, err := probePort(c, g.Port)
		if err != nil {
			return err
		}
		if g.Host != "" {
			host = g.Host
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "kube-probe/1.35")
		for _, h := range g.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		res, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe %s answered %d", req.URL, res.StatusCode)
		}
		return nil
	case pr.TCPSocket != nil:
		port, err := probePort(c, pr.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case pr.Exec != nil:
		pid, err := inst.running()
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, p.r.cfg.nsenter, nsenterArgs(pid, workDir(c), p.r.cfg.setpriv, pr.Exec.Command)...)
		cmd.Env = inst.env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("exec probe %v: %v: %s", pr.Exec.Command, err, out)
		}
		return nil
	}
	return nil // gRPC probes are not run here: counted as passing (docs/control-plane.md)
}

// probePort resolves a probe's port: a number, or the name of one of the container's ports.
func probePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("probe port %q names no port of container %q", port.StrVal, c.Name)
}
