// compose-config loads a Compose file with compose-go, the library `docker compose` itself uses
// to read, interpolate, validate (against the Compose specification's JSON schema) and normalise
// Compose files, and prints the resolved model like `docker compose config` would. No Docker
// daemon needed.
//
//	go run . -f ../../docker-compose.yml [--profile observability] [-q]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

type profiles []string

func (p *profiles) String() string     { return strings.Join(*p, ",") }
func (p *profiles) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	file := flag.String("f", "docker-compose.yml", "compose file")
	quiet := flag.Bool("q", false, "only validate; print a one-line summary")
	var prof profiles
	flag.Var(&prof, "profile", "profile to enable (repeatable)")
	flag.Parse()

	abs, err := filepath.Abs(*file)
	if err != nil {
		fail(err)
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithProfiles(prof),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		fail(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	if *quiet {
		names := make([]string, 0, len(project.Services))
		for name := range project.Services {
			names = append(names, name)
		}
		sort.Strings(names)
		disabled := make([]string, 0, len(project.DisabledServices))
		for name := range project.DisabledServices {
			disabled = append(disabled, name)
		}
		sort.Strings(disabled)
		fmt.Printf("compose-go: project %q valid: services %s; networks %d, volumes %d; disabled by profile: %s\n",
			project.Name, strings.Join(names, ","), len(project.Networks), len(project.Volumes),
			strings.Join(disabled, ","))
		checkBuilds(project)
		return
	}
	out, err := project.MarshalYAML()
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
	checkBuilds(project)
}

// checkBuilds: every build context and Dockerfile exists once paths are resolved.
func checkBuilds(project *types.Project) {
	for name, svc := range project.Services {
		if svc.Build == nil {
			continue
		}
		df := svc.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		if !filepath.IsAbs(df) {
			df = filepath.Join(svc.Build.Context, df)
		}
		if _, err := os.Stat(df); err != nil {
			fail(fmt.Errorf("service %s: %v", name, err))
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compose-config:", err)
	os.Exit(1)
}
