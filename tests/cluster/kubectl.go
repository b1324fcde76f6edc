package main

// kubectl from the same module set (k8s.io/kubectl, as cmd/kubectl in
// k8s.io/kubernetes builds it), so tests don't need a separate download.

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// client auth plugins, as in the real kubectl
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func runKubectl(args []string) {
	os.Args = args
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
