// Command kube is one binary for the Kubernetes parts tenantgate's tests run:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl,
// each the upstream command. The component is chosen by the first argument
// (or by the name the binary is called by), and only that one is built into
// the process: the API server's signal context panics when set up twice.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = "usage: kube {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubectl} [flags]"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "kube" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Exit(run(name, args))
}

func run(name string, args []string) int {
	switch name {
	case "etcd":
		// etcdmain.Main parses its argument list from the second element on.
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	case "kube-scheduler":
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	case "kubectl":
		cmd := kubectlcmd.NewDefaultKubectlCommand()
		cmd.SetArgs(args)
		if err := cli.RunNoErrOutput(cmd); err != nil {
			kubectlutil.CheckErr(err)
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "kube: unknown component %q\n%s\n", name, usage)
	return 2
}
