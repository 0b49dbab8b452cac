//go:build bench

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/app"
	"github.com/ccmkit/ccmkit/test/harness"
)

var (
	memNodes    = flag.Int("bench.mem-nodes", 3000, "Nodes of the memory bench (M1)")
	memServices = flag.Int("bench.mem-services", 1000, "LoadBalancer Services of the memory bench (M1)")
	memLBNodes  = flag.Int("bench.mem-lb-nodes", -1, "Nodes eligible for load balancers (-1: all); the others carry the exclusion label")
	memLatency  = flag.Duration("bench.mem-lb-latency", 200*time.Millisecond, "latency of the fake cloud's EnsureLoadBalancer and UpdateLoadBalancer in the memory bench (M1)")
)

// memProcess is one CCM binary's run: its memory once converged.
type memProcess struct {
	name      string
	hwm, rss  int64 // kB, VmHWM and VmRSS
	converged time.Duration
	calls     map[string]int // by method
}

// TestMemoryBench (M1) creates memNodes Nodes and memServices LoadBalancer
// Services shaped as a real cluster's (kubelet status with images,
// conditions and nodeInfo; Services applied with kubectl), runs ccmkit's
// binary and then upstream's (k8s.io/cloud-provider/app with the same fake
// provider) on them, each until every Service has been ensured, then adds
// a Node so that every load balancer is updated, and reads their peak and
// resident memory from /proc. It then measures the objects' heap in this process
// raw and after app.StripUnused.
func TestMemoryBench(t *testing.T) {
	ctx := t.Context()
	cp := harness.StartControlPlane(t)
	if err := setUpServices(ctx, cp.Client); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	binaries := map[string]string{"ccmkit": "./cmd/cloud-controller-manager", "upstream": "./test/bench/upstreamccm"}
	for name, pkg := range binaries {
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	kubeconfig := cp.Kubeconfig

	start := time.Now()
	if err := serviceParallel(*memNodes, func(i int) error { return createMemNode(ctx, cp.Client, i) }); err != nil {
		t.Fatal(err)
	}
	if err := serviceParallel(*memServices, func(i int) error { return createMemService(ctx, cp.Client, i) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d Nodes and %d Services in %s", *memNodes, *memServices, time.Since(start).Round(time.Second))

	var runs []memProcess
	for _, name := range []string{"upstream", "ccmkit"} {
		r, err := runMemProcess(ctx, t, cp.Client, filepath.Join(dir, name), name, dir, kubeconfig)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: VmHWM %d MiB, VmRSS %d MiB, converged in %s", name, r.hwm/1024, r.rss/1024, r.converged.Round(time.Second))
		runs = append(runs, r)
	}
	cache, err := measureCache(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := printMemTable(os.Stdout, runs, cache); err != nil {
		t.Fatal(err)
	}
}

// runMemProcess starts a CCM binary with the fake cloud and waits until it
// has ensured every Service and its load-balancer calls have stopped for
// 5 s. It then adds a Node, so that every load balancer is updated, waits
// the same way, waits 10 s more, reads the process's memory, stops it and
// deletes the added Node.
func runMemProcess(ctx context.Context, t *testing.T, client kubernetes.Interface, binary, name, dir, kubeconfig string) (memProcess, error) {
	r := memProcess{name: name}
	admin, err := freeAddr()
	if err != nil {
		return r, err
	}
	config := filepath.Join(dir, name+"-cloud.yaml")
	if err := os.WriteFile(config, []byte(memCloudConfig(admin)), 0o600); err != nil {
		return r, err
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return r, err
	}
	defer log.Close() //nolint:errcheck // a log
	cmd := exec.Command(binary, "--cloud-provider=fake", "--cloud-config="+config, "--kubeconfig="+kubeconfig,
		"--leader-elect=false", "--secure-port=0", "--configure-cloud-routes=false", "--controllers=*",
		"--concurrent-service-syncs=10", "--kube-api-qps=1000", "--kube-api-burst=2000", "--v=1")
	cmd.Stdout, cmd.Stderr = log, log
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		added := memNodeName(*memNodes)
		if err := client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), added, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting Node %s: %v", added, err)
		}
	}()

	// settled waits until the load-balancer calls have stopped for 5 s and
	// method has been called at least want times.
	settled := func(method string, want int) error {
		last, lastChange := -1, time.Now()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			select {
			case <-exited:
				return false, fmt.Errorf("%s exited: %w (see its log)", name, waitErr)
			default:
			}
			calls, err := fakeCalls(ctx, admin)
			if err != nil {
				return false, nil // the admin API is not up yet
			}
			r.calls = calls
			lb := calls["EnsureLoadBalancer"] + calls["UpdateLoadBalancer"] + calls["EnsureLoadBalancerDeleted"] + calls["GetLoadBalancer"]
			if lb != last {
				last, lastChange = lb, time.Now()
				return false, nil
			}
			return calls[method] >= want && time.Since(lastChange) >= 5*time.Second, nil
		})
		if err != nil {
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("not settled (%d %s calls, want %d): %w\n%s", r.calls[method], method, want, err, tailLines(string(out), 20))
		}
		return nil
	}
	if err := settled("EnsureLoadBalancer", *memServices); err != nil {
		return r, err
	}
	r.converged = time.Since(started)
	if err := createMemNode(ctx, client, *memNodes); err != nil {
		return r, err
	}
	if err := settled("UpdateLoadBalancer", *memServices); err != nil {
		return r, err
	}
	if err := routePause(ctx, 10*time.Second); err != nil {
		return r, err
	}
	r.hwm, r.rss, err = procMemory(cmd.Process.Pid)
	return r, err
}

// fakeCalls counts the fake cloud's calls by method through its admin API.
func fakeCalls(ctx context.Context, admin string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/calls", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	var body struct {
		Calls []struct {
			Method string `json:"method"`
		} `json:"calls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	calls := map[string]int{}
	for _, c := range body.Calls {
		calls[c.Method]++
	}
	return calls, nil
}

// procMemory reads VmHWM and VmRSS (kB) of a process.
func procMemory(pid int) (hwm, rss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close() //nolint:errcheck // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmHWM:":
			hwm = v
		case "VmRSS:":
			rss = v
		}
	}
	if hwm == 0 {
		return 0, 0, errors.New("no VmHWM in /proc status")
	}
	return hwm, rss, sc.Err()
}

// memCloudConfig is the fake cloud of the bench: an instance per Node, a
// VIP pool for every Service, the admin API on admin.
func memCloudConfig(admin string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "adminAddress: %s\nloadBalancers: {vipCIDR: %s}\n", admin, serviceVIPCIDR)
	fmt.Fprintf(&b, "faults:\n- {method: EnsureLoadBalancer, latency: %s}\n- {method: UpdateLoadBalancer, latency: %s}\ninstances:\n", *memLatency, *memLatency)
	for i := range *memNodes + 1 {
		fmt.Fprintf(&b, "- {name: %s, id: i-%06d, type: m5.xlarge, zone: zone-%c, region: region-1, addresses: [{type: InternalIP, address: %s}]}\n",
			memNodeName(i), i, 'a'+rune(i%3), memNodeIP(i))
	}
	return b.String()
}

// eligibleMemNodes is how many of M1's Nodes load balancers are made from
// before the one added during the run.
func eligibleMemNodes() int {
	if *memLBNodes < 0 {
		return *memNodes
	}
	return min(*memLBNodes, *memNodes)
}

func memNodeName(i int) string { return fmt.Sprintf("mem-node-%05d", i) }

func memNodeIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", 1+i/65536, (i/256)%256, i%256) }

// createMemNode creates an initialised Node with the status a kubelet
// reports: 50 images, five conditions, capacity, nodeInfo.
func createMemNode(ctx context.Context, client kubernetes.Interface, i int) error {
	name := memNodeName(i)
	labels := map[string]string{
		v1.LabelHostname: name, v1.LabelTopologyZone: fmt.Sprintf("zone-%c", 'a'+rune(i%3)), v1.LabelTopologyRegion: "region-1",
		v1.LabelInstanceTypeStable: "m5.xlarge", v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64",
		"node-role.kubernetes.io/worker": "", "example.com/pool": "general",
	}
	// The Node added during the run (i == *memNodes) is always eligible.
	if i >= eligibleMemNodes() && i < *memNodes {
		labels[v1.LabelNodeExcludeBalancers] = "true"
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"i-%06d","efs.csi.aws.com":"i-%06d"}`, i, i),
			"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///run/containerd/containerd.sock",
		}},
		Spec: v1.NodeSpec{ProviderID: fmt.Sprintf("fake://i-%06d", i), PodCIDR: fmt.Sprintf("10.244.%d.0/24", i%256), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i%256)}},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	created.Status = memNodeStatus(i)
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of Node %s: %w", name, err)
	}
	return nil
}

func memNodeStatus(i int) v1.NodeStatus {
	now := metav1.Now()
	resources := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("16Gi"), v1.ResourcePods: resource.MustParse("110"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"), "hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	st := v1.NodeStatus{
		Capacity: resources, Allocatable: resources,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			cond(v1.NodeNetworkUnavailable, v1.ConditionFalse, "RouteCreated", "RouteController created a route"),
		},
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: memNodeIP(i)}, {Type: v1.NodeHostName, Address: memNodeName(i)},
			{Type: v1.NodeInternalDNS, Address: memNodeName(i) + ".region-1.compute.internal"}},
		DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}},
		NodeInfo: v1.NodeSystemInfo{
			MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%029x", i), BootID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i),
			KernelVersion: "6.1.112-124.190.amzn2023.x86_64", OSImage: "Amazon Linux 2023.6.20241031", ContainerRuntimeVersion: "containerd://1.7.23",
			KubeletVersion: "v1.37.0", OperatingSystem: "linux", Architecture: "amd64",
		},
	}
	for k := range 50 {
		repo := fmt.Sprintf("registry.example.com/team-%d/service-%d", k%7, k)
		st.Images = append(st.Images, v1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, k*7919+1), fmt.Sprintf("%s:v1.%d.%d", repo, k, i%10)},
			SizeBytes: int64(20_000_000 + k*1_000_000),
		})
	}
	return st
}

// createMemService creates a LoadBalancer Service as kubectl apply leaves
// it, and gives it an ingress.
func createMemService(ctx context.Context, client kubernetes.Interface, i int) error {
	name := serviceName(i)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: serviceNamespace, Labels: map[string]string{
			"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "kubectl",
		}},
		Spec: v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app.kubernetes.io/name": name},
			// Two node ports a Service would exhaust the apiserver's range
			// (2,768) at 1,400 Services.
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(8443)},
			},
		},
	}
	applied, err := json.Marshal(svc)
	if err != nil {
		return err
	}
	svc.Annotations = map[string]string{v1.LastAppliedConfigAnnotation: string(applied)}
	created, err := client.CoreV1().Services(serviceNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Service %s: %w", name, err)
	}
	created.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/256, i%256)}}
	if _, err := client.CoreV1().Services(serviceNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of Service %s: %w", name, err)
	}
	return nil
}

// cacheSize is the heap the bench's Nodes and Services take in this
// process, as an informer decodes them, raw and after app.StripUnused.
type cacheSize struct {
	nodesRaw, nodesStripped       uint64
	servicesRaw, servicesStripped uint64
	// fields: bytes of the Nodes' JSON by part, before stripping.
	fields []fieldShare
}

type fieldShare struct {
	part  string
	bytes int
}

func measureCache(ctx context.Context, cp *harness.ControlPlane) (cacheSize, error) {
	var c cacheSize
	client, err := newClient(cp.Config) // protobuf, as both commands
	if err != nil {
		return c, err
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	listNodes := func() (*v1.NodeList, error) {
		return client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	}
	listServices := func() (*v1.ServiceList, error) {
		return client.CoreV1().Services(serviceNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	}

	// Each list is held while the heap is read, raw, then stripped in
	// place (what is dropped becomes garbage).
	before := heap()
	nodes, err := listNodes()
	if err != nil {
		return c, err
	}
	c.nodesRaw = heap() - before
	for i := range nodes.Items {
		c.fields = addShares(c.fields, &nodes.Items[i])
		if _, err := app.StripUnused(&nodes.Items[i]); err != nil {
			return c, err
		}
	}
	c.nodesStripped = heap() - before
	runtime.KeepAlive(nodes)
	nodes = nil

	before = heap()
	svcs, err := listServices()
	if err != nil {
		return c, err
	}
	c.servicesRaw = heap() - before
	for i := range svcs.Items {
		if _, err := app.StripUnused(&svcs.Items[i]); err != nil {
			return c, err
		}
	}
	c.servicesStripped = heap() - before
	runtime.KeepAlive(svcs)
	return c, nil
}

// addShares adds a Node's JSON bytes by part.
func addShares(shares []fieldShare, n *v1.Node) []fieldShare {
	size := func(v any) int {
		b, _ := json.Marshal(v)
		return len(b)
	}
	parts := []fieldShare{
		{"metadata.managedFields", size(n.ManagedFields)},
		{"metadata (the rest)", size(n.ObjectMeta) - size(n.ManagedFields)},
		{"spec", size(n.Spec)},
		{"status.images", size(n.Status.Images)},
		{"status.conditions (all)", size(n.Status.Conditions)},
		{"status.nodeInfo", size(n.Status.NodeInfo)},
		{"status.capacity+allocatable", size(n.Status.Capacity) + size(n.Status.Allocatable)},
		{"status.addresses", size(n.Status.Addresses)},
	}
	if shares == nil {
		return parts
	}
	for i := range shares {
		shares[i].bytes += parts[i].bytes
	}
	return shares
}

func printMemTable(w io.Writer, runs []memProcess, c cacheSize) error {
	byName := map[string]memProcess{}
	for _, r := range runs {
		byName[r.name] = r
	}
	up, ccm := byName["upstream"], byName["ccmkit"]
	ratio := func(a, b int64) string { return fmt.Sprintf("%.2fx", float64(b)/float64(a)) }
	mib := func(kb int64) string { return fmt.Sprintf("%d MiB", kb/1024) }
	rows := [][]string{
		{"M1", "upstream", "ccmkit", "ccmkit / upstream"},
		{"peak RSS (VmHWM)", mib(up.hwm), mib(ccm.hwm), ratio(up.hwm, ccm.hwm)},
		{"RSS once converged (VmRSS)", mib(up.rss), mib(ccm.rss), ratio(up.rss, ccm.rss)},
		{"EnsureLoadBalancer calls", fmt.Sprint(up.calls["EnsureLoadBalancer"]), fmt.Sprint(ccm.calls["EnsureLoadBalancer"]), "-"},
		{"UpdateLoadBalancer calls", fmt.Sprint(up.calls["UpdateLoadBalancer"]), fmt.Sprint(ccm.calls["UpdateLoadBalancer"]), "-"},
	}
	if err := writeRows(w, rows); err != nil {
		return err
	}
	mb := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe objects on the heap as an informer decodes them (this process), raw / after app.StripUnused:\n")
	fmt.Fprintf(&b, "  %d Nodes:    %s / %s\n  %d Services: %s / %s\n", *memNodes, mb(c.nodesRaw), mb(c.nodesStripped), *memServices, mb(c.servicesRaw), mb(c.servicesStripped))
	total := 0
	for _, f := range c.fields {
		total += f.bytes
	}
	fmt.Fprintf(&b, "A Node's JSON by part (share of %d bytes a Node):\n", total/max(*memNodes, 1))
	for _, f := range c.fields {
		fmt.Fprintf(&b, "  %-30s %5.1f%%\n", f.part, 100*float64(f.bytes)/float64(max(total, 1)))
	}
	fmt.Fprintf(&b, "\nM1: %d Nodes (kubelet status: 50 images, 5 conditions, nodeInfo; %d eligible for load balancers), %d LoadBalancer\n"+
		"Services applied with kubectl (no node ports); load-balancer calls take %s. Each binary alone, --leader-elect=false, client QPS 1000,\n"+
		"10 service workers, routes off: until every Service was ensured and load-balancer calls stopped for 5 s; then one eligible Node\n"+
		"more, until every load balancer was updated and the calls stopped for 5 s; then 10 s more.\n", *memNodes, eligibleMemNodes(), *memServices, *memLatency)
	fmt.Fprintf(&b, "MEASURED m1_vmhwm_upstream_mib=%d m1_vmhwm_ccmkit_mib=%d ratio=%s\n", up.hwm/1024, ccm.hwm/1024, ratio(up.hwm, ccm.hwm))
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("printing the table: %w", err)
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close() //nolint:errcheck // probe
	return ln.Addr().String(), nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
