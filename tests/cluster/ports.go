package main

// Stable ports: the first start of a data dir picks free loopback ports and
// records them in DIR/ports; every later start of the same dir (after
// `down --keep` or after the process was killed) listens on exactly those
// ports again, so clients that read DIR/kubeconfig once can reconnect. If a
// recorded port is taken by someone else, the start fails with a clear
// message instead of moving to another port.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

type clusterPorts struct {
	APIServer  int // kube-apiserver secure port
	EtcdClient int
	EtcdPeer   int
}

// readPorts reads DIR/ports; ok is false if the file does not exist.
func readPorts(path string) (clusterPorts, bool, error) {
	var p clusterPorts
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 65535 {
			return p, false, fmt.Errorf("%s: bad port %q for %s", path, v, k)
		}
		switch k {
		case "apiserver":
			p.APIServer = n
		case "etcd_client":
			p.EtcdClient = n
		case "etcd_peer":
			p.EtcdPeer = n
		}
	}
	if err := sc.Err(); err != nil {
		return p, false, err
	}
	if p.APIServer == 0 || p.EtcdClient == 0 || p.EtcdPeer == 0 {
		return p, false, fmt.Errorf("%s: incomplete (need apiserver, etcd_client, etcd_peer); delete it to pick new ports", path)
	}
	return p, true, nil
}

func writePorts(path string, p clusterPorts) error {
	content := fmt.Sprintf("apiserver=%d\netcd_client=%d\netcd_peer=%d\n", p.APIServer, p.EtcdClient, p.EtcdPeer)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// listenRecorded listens on 127.0.0.1:port, a port recorded for this dir.
// "address in use" becomes an error that says who holds it (if known).
func listenRecorded(what string, port int, portsFile string) (net.Listener, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		return ln, nil
	}
	return nil, portTakenError(what, port, portsFile, err)
}

// checkRecordedPort verifies that a recorded port can be bound right now
// (for etcd, which opens its own listeners).
func checkRecordedPort(what string, port int, portsFile string) error {
	ln, err := listenRecorded(what, port, portsFile)
	if err != nil {
		return err
	}
	return ln.Close()
}

func portTakenError(what string, port int, portsFile string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: listen on recorded port 127.0.0.1:%d: %w", what, port, err)
	}
	owner := portOwner(port)
	if owner == "" {
		owner = "another process"
	}
	return fmt.Errorf("%s port 127.0.0.1:%d (recorded in %s at the first start of this dir) is in use by %s; "+
		"not moving to another port because clients of this dir keep the address. Stop that process, "+
		"or start a new dir (or delete %s to pick new ports)", what, port, portsFile, owner, portsFile)
}

// portOwner names the process listening on a local TCP port, best effort
// (/proc/net/tcp{,6} for the socket inode, then /proc/*/fd).
func portOwner(port int) string {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil || int(n) != port || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			inodes[fields[9]] = true
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		target, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		if !inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] {
			continue
		}
		pidDir := filepath.Dir(filepath.Dir(fd))
		cmd, _ := os.ReadFile(filepath.Join(pidDir, "cmdline"))
		c := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		if len(c) > 200 {
			c = c[:200] + "..."
		}
		return fmt.Sprintf("pid %s (%s)", filepath.Base(pidDir), c)
	}
	return "a process that is not visible here (socket inode without owner in /proc)"
}
