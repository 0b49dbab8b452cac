package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// EC2 error codes of security groups.
const (
	codeDependencyViolation = "DependencyViolation"
	codeGroupNotFound       = "InvalidGroup.NotFound"
	codePermissionDuplicate = "InvalidPermission.Duplicate"
	codePermissionNotFound  = "InvalidPermission.NotFound"
)

// Filters and values of security-group rules.
const (
	filterPermissionGroupID = "ip-permission.group-id"
	protocolAll             = "-1"
	protocolTCP             = "tcp"
	protocolICMP            = "icmp"
	// protocolICMPv6 is ICMPv6 as EC2 describes it: by number.
	protocolICMPv6 = "58"
)

// The ICMP messages of path MTU discovery, as EC2 writes an ICMP rule:
// the type in FromPort, the code in ToPort. IPv4: destination
// unreachable (3), fragmentation needed (4); IPv6: packet too big (2, 0).
const (
	icmpUnreachable         = 3
	icmpFragmentationNeeded = 4
	icmpv6PacketTooBig      = 2
)

// elbSecurityGroupName is the name of a Classic ELB's own security group,
// aws-cloud-controller-manager's.
func elbSecurityGroupName(lbName string) string { return "k8s-elb-" + lbName }

// findSecurityGroup returns the security group of the name (in the VPC
// when one is given), nil when there is none.
func (l *loadBalancers) findSecurityGroup(ctx context.Context, name, vpc string) (*ec2types.SecurityGroup, error) {
	filters := []ec2types.Filter{{Name: aws.String(filterGroupName), Values: []string{name}}}
	if vpc != "" {
		filters = append(filters, ec2types.Filter{Name: aws.String(filterVPCID), Values: []string{vpc}})
	}
	out, err := l.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("describing security group %s: %w", name, err)
	}
	switch len(out.SecurityGroups) {
	case 0:
		return nil, nil
	case 1:
		return &out.SecurityGroups[0], nil
	}
	return nil, fmt.Errorf("%d security groups are named %s; set [Global] VPC", len(out.SecurityGroups), name)
}

// ensureELBSecurityGroup returns the Classic ELB's own security group,
// created when missing, with ingress on the listener ports from the
// source ranges and nothing else.
func (l *loadBalancers) ensureELBSecurityGroup(ctx context.Context, clusterID string, svc *v1.Service, lbName, vpc string, o *lbOptions, tags map[string]string) (string, error) {
	name := elbSecurityGroupName(lbName)
	sg, err := l.findSecurityGroup(ctx, name, vpc)
	if err != nil {
		return "", err
	}
	var id string
	var current []ec2types.IpPermission
	if sg == nil {
		out, err := l.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
			GroupName:   aws.String(name),
			Description: aws.String(fmt.Sprintf("Security group for Kubernetes ELB %s (%s)", lbName, serviceName(svc))),
			VpcId:       aws.String(vpc),
			TagSpecifications: []ec2types.TagSpecification{{
				ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: ec2Tags(tags),
			}},
		})
		if err != nil {
			return "", fmt.Errorf("creating security group %s: %w", name, err)
		}
		id = aws.ToString(out.GroupId)
		klog.FromContext(ctx).V(2).Info("Created security group", "securityGroup", id, "name", name)
	} else {
		id = aws.ToString(sg.GroupId)
		has := ec2TagMap(sg.Tags)
		if !ownedBy(has, clusterID, svc) {
			return "", foreignError("security group", name, clusterID, svc)
		}
		if add := missingTags(has, tags); len(add) > 0 {
			if _, err := l.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: ec2Tags(add)}); err != nil {
				return "", fmt.Errorf("tagging security group %s: %w", id, err)
			}
		}
		current = sg.IpPermissions
	}
	var ports []int32
	for _, p := range o.ports {
		ports = append(ports, p.Port)
	}
	return id, l.syncIngress(ctx, id, current, ingressRules(ports, o.sourceRanges))
}

// ingressRule is one rule of a Classic ELB's own security group: a TCP
// port (from and to the same), or an ICMP type and code, open to a CIDR.
type ingressRule struct {
	protocol string
	from, to int32
	cidr     string
}

// ingressRules are the listener ports open to the source ranges, and the
// ICMP messages of path MTU discovery from them, as
// aws-cloud-controller-manager lets in: without them a client behind a
// smaller MTU never learns to send smaller packets.
func ingressRules(ports []int32, ranges []string) []ingressRule {
	var out []ingressRule
	for _, p := range ports {
		for _, c := range ranges {
			out = append(out, ingressRule{protocol: protocolTCP, from: p, to: p, cidr: c})
		}
	}
	for _, c := range ranges {
		if pfx, err := netip.ParsePrefix(c); err == nil && pfx.Addr().Is6() {
			out = append(out, ingressRule{protocol: protocolICMPv6, from: icmpv6PacketTooBig, to: 0, cidr: c})
		} else {
			out = append(out, ingressRule{protocol: protocolICMP, from: icmpUnreachable, to: icmpFragmentationNeeded, cidr: c})
		}
	}
	return out
}

// rulesOf are a security group's ingress rules of single TCP ports and of
// ICMP to CIDRs; other rules are returned as permissions to revoke.
func rulesOf(perms []ec2types.IpPermission) (rules []ingressRule, other []ec2types.IpPermission) {
	for _, p := range perms {
		proto := aws.ToString(p.IpProtocol)
		if proto == "icmpv6" {
			proto = protocolICMPv6
		}
		known := p.FromPort != nil && p.ToPort != nil &&
			(proto == protocolTCP && *p.FromPort == *p.ToPort || proto == protocolICMP || proto == protocolICMPv6)
		if !known || len(p.UserIdGroupPairs) > 0 || len(p.PrefixListIds) > 0 {
			other = append(other, p)
			continue
		}
		for _, r := range p.IpRanges {
			rules = append(rules, ingressRule{protocol: proto, from: *p.FromPort, to: *p.ToPort, cidr: aws.ToString(r.CidrIp)})
		}
		for _, r := range p.Ipv6Ranges {
			rules = append(rules, ingressRule{protocol: proto, from: *p.FromPort, to: *p.ToPort, cidr: aws.ToString(r.CidrIpv6)})
		}
	}
	return rules, other
}

// permission is the EC2 permission of a rule.
func (r ingressRule) permission() ec2types.IpPermission {
	p := ec2types.IpPermission{IpProtocol: aws.String(r.protocol), FromPort: aws.Int32(r.from), ToPort: aws.Int32(r.to)}
	if pfx, err := netip.ParsePrefix(r.cidr); err == nil && pfx.Addr().Is6() {
		p.Ipv6Ranges = []ec2types.Ipv6Range{{CidrIpv6: aws.String(r.cidr)}}
	} else {
		p.IpRanges = []ec2types.IpRange{{CidrIp: aws.String(r.cidr)}}
	}
	return p
}

// syncIngress makes want the ingress rules of a security group of the
// load balancer's own: missing rules are authorised, others revoked.
func (l *loadBalancers) syncIngress(ctx context.Context, sgID string, current []ec2types.IpPermission, want []ingressRule) error {
	have, other := rulesOf(current)
	revoke := other
	for _, r := range have {
		if !slices.Contains(want, r) {
			revoke = append(revoke, r.permission())
		}
	}
	var add []ec2types.IpPermission
	for _, r := range want {
		if !slices.Contains(have, r) {
			add = append(add, r.permission())
		}
	}
	if len(add) > 0 {
		_, err := l.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(sgID), IpPermissions: add})
		if err != nil && errorCode(err) != codePermissionDuplicate {
			return fmt.Errorf("authorising ingress to security group %s: %w", sgID, err)
		}
	}
	if len(revoke) > 0 {
		_, err := l.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(sgID), IpPermissions: revoke})
		if err != nil && errorCode(err) != codePermissionNotFound {
			return fmt.Errorf("revoking ingress from security group %s: %w", sgID, err)
		}
	}
	if len(add)+len(revoke) > 0 {
		klog.FromContext(ctx).V(2).Info("Changed security group ingress", "securityGroup", sgID, "authorised", len(add), "revoked", len(revoke))
	}
	return nil
}

// nodeSecurityGroups are the security groups that the load balancer's
// traffic to the instances is let in by: per instance, the one with the
// cluster tag, or its only group when none has the tag. An instance with
// several tagged groups, or several untagged ones, is an error, as
// aws-cloud-controller-manager has it: which one to open is not known.
func (l *loadBalancers) nodeSecurityGroups(ctx context.Context, clusterID string, instances []ec2types.Instance) ([]string, error) {
	var ids []string
	for _, in := range instances {
		for _, g := range in.SecurityGroups {
			ids = append(ids, aws.ToString(g.GroupId))
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	tagged := map[string]bool{}
	pages := ec2.NewDescribeSecurityGroupsPaginator(l.ec2, &ec2.DescribeSecurityGroupsInput{GroupIds: ids})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing the nodes' security groups: %w", err)
		}
		for _, g := range page.SecurityGroups {
			if _, ok := ec2TagMap(g.Tags)[tagClusterPrefix+clusterID]; ok {
				tagged[aws.ToString(g.GroupId)] = true
			}
		}
	}
	var out []string
	for _, in := range instances {
		var withTag, without []string
		for _, g := range in.SecurityGroups {
			if id := aws.ToString(g.GroupId); tagged[id] {
				withTag = append(withTag, id)
			} else {
				without = append(without, id)
			}
		}
		switch {
		case len(withTag) == 1:
			out = append(out, withTag[0])
		case len(withTag) > 1:
			return nil, fmt.Errorf("instance %s has several security groups with the tag %s%s (%s): tag only the nodes' group",
				aws.ToString(in.InstanceId), tagClusterPrefix, clusterID, strings.Join(withTag, ", "))
		case len(without) == 1:
			out = append(out, without[0])
		case len(without) > 1:
			return nil, fmt.Errorf("instance %s has several security groups and none with the tag %s%s (%s): tag the nodes' group",
				aws.ToString(in.InstanceId), tagClusterPrefix, clusterID, strings.Join(without, ", "))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// groupsReferencing are the security groups with an ingress rule from
// source.
func (l *loadBalancers) groupsReferencing(ctx context.Context, source string) ([]ec2types.SecurityGroup, error) {
	var out []ec2types.SecurityGroup
	pages := ec2.NewDescribeSecurityGroupsPaginator(l.ec2, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
		{Name: aws.String(filterPermissionGroupID), Values: []string{source}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing the security groups that let %s in: %w", source, err)
		}
		out = append(out, page.SecurityGroups...)
	}
	return out, nil
}

// fromGroup is the rule that lets everything from a security group in.
func fromGroup(source string) ec2types.IpPermission {
	return ec2types.IpPermission{IpProtocol: aws.String(protocolAll), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String(source)}}}
}

// hasRuleFrom reports whether a security group lets everything from
// source in.
func hasRuleFrom(g ec2types.SecurityGroup, source string) bool {
	for _, p := range g.IpPermissions {
		if aws.ToString(p.IpProtocol) != protocolAll {
			continue
		}
		for _, pair := range p.UserIdGroupPairs {
			if aws.ToString(pair.GroupId) == source {
				return true
			}
		}
	}
	return false
}

// syncNodeIngress lets the load balancer's security group (source) into
// the groups of want: the rule is added where it is missing and, with
// revoke, revoked from groups that are not wanted any more.
func (l *loadBalancers) syncNodeIngress(ctx context.Context, source string, want []string, revoke bool) error {
	groups, err := l.groupsReferencing(ctx, source)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	var errs []error
	for _, g := range groups {
		id := aws.ToString(g.GroupId)
		if !hasRuleFrom(g, source) {
			continue
		}
		has[id] = true
		if revoke && !slices.Contains(want, id) {
			errs = append(errs, l.revokeFrom(ctx, id, source))
		}
	}
	for _, id := range want {
		if has[id] {
			continue
		}
		_, err := l.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(id), IpPermissions: []ec2types.IpPermission{fromGroup(source)}})
		if err != nil && errorCode(err) != codePermissionDuplicate {
			errs = append(errs, fmt.Errorf("letting %s into node security group %s: %w", source, id, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Let the load balancer into a node security group", "securityGroup", id, "source", source)
	}
	return errors.Join(errs...)
}

// revokeFrom revokes a node security group's rule from source.
func (l *loadBalancers) revokeFrom(ctx context.Context, id, source string) error {
	_, err := l.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(id), IpPermissions: []ec2types.IpPermission{fromGroup(source)}})
	if err != nil && errorCode(err) != codePermissionNotFound && errorCode(err) != codeGroupNotFound {
		return fmt.Errorf("revoking the rule from %s of security group %s: %w", source, id, err)
	}
	klog.FromContext(ctx).V(2).Info("Revoked the load balancer's rule from a node security group", "securityGroup", id, "source", source)
	return nil
}

// deleteSecurityGroup deletes a load balancer's own security group after
// revoking the rules that let it into other groups, trying again while
// EC2 counts it as in use (a deleted ELB's interfaces take a while to
// go).
func (l *loadBalancers) deleteSecurityGroup(ctx context.Context, id string) error {
	if err := l.syncNodeIngress(ctx, id, nil, true); err != nil {
		return err
	}
	err := retryWhileInUse(ctx, l.inUseInterval, l.inUseTimeout, func(err error) bool { return errorCode(err) == codeDependencyViolation },
		func(ctx context.Context) error {
			_, err := l.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(id)})
			if errorCode(err) == codeGroupNotFound {
				return nil
			}
			return err
		})
	if err != nil {
		return fmt.Errorf("deleting security group %s: %w", id, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted security group", "securityGroup", id)
	return nil
}

// Descriptions that mark the rules a Network Load Balancer adds to the
// nodes' security groups, aws-cloud-controller-manager's: client traffic
// from the source ranges, and health checks from the VPC.
const (
	ruleNLBClient = "kubernetes.io/rule/nlb/client="
	ruleNLBHealth = "kubernetes.io/rule/nlb/health="
)

// nodeRule is one rule of a Network Load Balancer in a node security
// group: a port of a protocol open to a CIDR.
type nodeRule struct {
	protocol    string
	port        int32
	cidr        string
	description string
}

// key is what EC2 tells rules apart by: not the description.
func (r nodeRule) key() nodeRule { r.description = ""; return r }

func (r nodeRule) permission() ec2types.IpPermission {
	p := ec2types.IpPermission{IpProtocol: aws.String(r.protocol), FromPort: aws.Int32(r.port), ToPort: aws.Int32(r.port)}
	if pfx, err := netip.ParsePrefix(r.cidr); err == nil && pfx.Addr().Is6() {
		p.Ipv6Ranges = []ec2types.Ipv6Range{{CidrIpv6: aws.String(r.cidr), Description: aws.String(r.description)}}
	} else {
		p.IpRanges = []ec2types.IpRange{{CidrIp: aws.String(r.cidr), Description: aws.String(r.description)}}
	}
	return p
}

// nlbNodeRules are the rules a Network Load Balancer needs in the nodes'
// security groups, as its targets see the clients' addresses: each
// NodePort from the source ranges, and the health check port from the
// VPC's CIDRs.
func nlbNodeRules(lbName string, o *lbOptions, vpcCIDRs []string) []nodeRule {
	var out []nodeRule
	seen := map[nodeRule]bool{}
	add := func(r nodeRule) {
		if !seen[r.key()] {
			seen[r.key()] = true
			out = append(out, r)
		}
	}
	for _, p := range o.ports {
		proto := strings.ToLower(string(protocolOf(p)))
		for _, c := range o.sourceRanges {
			add(nodeRule{protocol: proto, port: p.NodePort, cidr: c, description: ruleNLBClient + lbName})
		}
	}
	var healthPorts []int32
	if o.health.port == trafficPort {
		for _, p := range o.ports {
			healthPorts = append(healthPorts, p.NodePort)
		}
	} else if n, err := strconv.Atoi(o.health.port); err == nil {
		healthPorts = append(healthPorts, int32(n))
	}
	for _, port := range healthPorts {
		for _, c := range vpcCIDRs {
			add(nodeRule{protocol: protocolTCP, port: port, cidr: c, description: ruleNLBHealth + lbName})
		}
	}
	return out
}

// nlbRulesOf are a security group's rules of the load balancer, found by
// their descriptions.
func nlbRulesOf(g ec2types.SecurityGroup, lbName string) []nodeRule {
	ours := func(d *string) bool {
		return aws.ToString(d) == ruleNLBClient+lbName || aws.ToString(d) == ruleNLBHealth+lbName
	}
	var out []nodeRule
	for _, p := range g.IpPermissions {
		if p.FromPort == nil || p.ToPort == nil || *p.FromPort != *p.ToPort {
			continue
		}
		for _, r := range p.IpRanges {
			if ours(r.Description) {
				out = append(out, nodeRule{aws.ToString(p.IpProtocol), *p.FromPort, aws.ToString(r.CidrIp), aws.ToString(r.Description)})
			}
		}
		for _, r := range p.Ipv6Ranges {
			if ours(r.Description) {
				out = append(out, nodeRule{aws.ToString(p.IpProtocol), *p.FromPort, aws.ToString(r.CidrIpv6), aws.ToString(r.Description)})
			}
		}
	}
	return out
}

// vpcCIDRs are the IPv4 and IPv6 CIDRs of a VPC.
func (l *loadBalancers) vpcCIDRs(ctx context.Context, vpc string) ([]string, error) {
	out, err := l.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{vpc}})
	if err != nil {
		return nil, fmt.Errorf("describing VPC %s: %w", vpc, err)
	}
	var cidrs []string
	for _, v := range out.Vpcs {
		for _, a := range v.CidrBlockAssociationSet {
			if a.CidrBlockState == nil || a.CidrBlockState.State == ec2types.VpcCidrBlockStateCodeAssociated {
				cidrs = append(cidrs, aws.ToString(a.CidrBlock))
			}
		}
		if len(v.CidrBlockAssociationSet) == 0 && v.CidrBlock != nil {
			cidrs = append(cidrs, aws.ToString(v.CidrBlock))
		}
		for _, a := range v.Ipv6CidrBlockAssociationSet {
			cidrs = append(cidrs, aws.ToString(a.Ipv6CidrBlock))
		}
	}
	slices.Sort(cidrs)
	return slices.Compact(cidrs), nil
}

// vpcSecurityGroups are the security groups of a VPC.
func (l *loadBalancers) vpcSecurityGroups(ctx context.Context, vpc string) ([]ec2types.SecurityGroup, error) {
	var out []ec2types.SecurityGroup
	pages := ec2.NewDescribeSecurityGroupsPaginator(l.ec2, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
		{Name: aws.String(filterVPCID), Values: []string{vpc}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing the security groups of VPC %s: %w", vpc, err)
		}
		out = append(out, page.SecurityGroups...)
	}
	return out, nil
}

// syncNLBNodeRules makes want the load balancer's rules in the groups of
// wantGroups and removes its rules from every other group of the VPC.
func (l *loadBalancers) syncNLBNodeRules(ctx context.Context, vpc, lbName string, wantGroups []string, want []nodeRule) error {
	groups, err := l.vpcSecurityGroups(ctx, vpc)
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range groups {
		id := aws.ToString(g.GroupId)
		have := nlbRulesOf(g, lbName)
		var wanted []nodeRule
		if slices.Contains(wantGroups, id) {
			wanted = want
		}
		var add, revoke []ec2types.IpPermission
		for _, r := range wanted {
			if !slices.Contains(have, r) {
				add = append(add, r.permission())
			}
		}
		for _, r := range have {
			if !slices.Contains(wanted, r) {
				revoke = append(revoke, r.permission())
			}
		}
		if len(revoke) > 0 {
			_, err := l.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(id), IpPermissions: revoke})
			if err != nil && errorCode(err) != codePermissionNotFound {
				errs = append(errs, fmt.Errorf("revoking the rules of %s from security group %s: %w", lbName, id, err))
				continue
			}
		}
		if len(add) > 0 {
			errs = append(errs, l.authorise(ctx, id, add))
		}
		if len(add)+len(revoke) > 0 {
			klog.FromContext(ctx).V(2).Info("Changed the load balancer's rules in a node security group", "securityGroup", id, "authorised", len(add), "revoked", len(revoke))
		}
	}
	return errors.Join(errs...)
}

// authorise adds rules to a security group; when one of them exists
// already (another load balancer's, with the same port and CIDR), the
// others are added one by one.
func (l *loadBalancers) authorise(ctx context.Context, id string, perms []ec2types.IpPermission) error {
	_, err := l.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(id), IpPermissions: perms})
	if errorCode(err) != codePermissionDuplicate || len(perms) == 1 {
		if err != nil && errorCode(err) != codePermissionDuplicate {
			return fmt.Errorf("authorising ingress to security group %s: %w", id, err)
		}
		return nil
	}
	for _, p := range perms {
		if err := l.authorise(ctx, id, []ec2types.IpPermission{p}); err != nil {
			return err
		}
	}
	return nil
}
