package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
)

// security are the global flags of how the CLI connects: TLS, and the
// client config file that may hold them (Kafka's --command-config).
type security struct {
	tls                       bool
	caFile, certFile, keyFile string
	serverName                string
	commandConfig             string
	// SCRAM: mechanism, user, and the file of the password (or the
	// password from SLUICE_SASL_PASSWORD; never a flag).
	saslMechanism, saslUsername, saslPasswordFile string
	saslPassword                                  string
	// OAUTHBEARER: the file of the token (read at each call), or the
	// token from SLUICE_SASL_TOKEN.
	saslTokenFile, saslToken string
}

// securityEnv maps each setting to its environment variable.
var securityEnv = map[string]string{
	"tls": "SLUICE_TLS", "tls-ca-file": "SLUICE_TLS_CA_FILE", "tls-cert-file": "SLUICE_TLS_CERT_FILE",
	"tls-key-file": "SLUICE_TLS_KEY_FILE", "tls-server-name": "SLUICE_TLS_SERVER_NAME", "command-config": "SLUICE_COMMAND_CONFIG",
	"sasl-mechanism": "SLUICE_SASL_MECHANISM", "sasl-username": "SLUICE_SASL_USERNAME", "sasl-password-file": "SLUICE_SASL_PASSWORD_FILE",
	"sasl-password": "SLUICE_SASL_PASSWORD", "sasl-token-file": "SLUICE_SASL_TOKEN_FILE", "sasl-token": "SLUICE_SASL_TOKEN",
}

func (s *security) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.tls, "tls", s.tls, "connect with TLS (implied by --tls-ca-file or --tls-cert-file; env SLUICE_TLS)")
	fs.StringVar(&s.caFile, "tls-ca-file", s.caFile, "CA that signed the brokers' certificates, PEM (default: the system's roots; env SLUICE_TLS_CA_FILE)")
	fs.StringVar(&s.certFile, "tls-cert-file", s.certFile, "client certificate, PEM, for brokers that ask for one (env SLUICE_TLS_CERT_FILE)")
	fs.StringVar(&s.keyFile, "tls-key-file", s.keyFile, "key of --tls-cert-file, PEM (env SLUICE_TLS_KEY_FILE)")
	fs.StringVar(&s.serverName, "tls-server-name", s.serverName, "name to check the brokers' certificates against instead of the host dialed (env SLUICE_TLS_SERVER_NAME)")
	fs.StringVar(&s.saslMechanism, "sasl-mechanism", s.saslMechanism, "authenticate with SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (a JWT; needs TLS; env SLUICE_SASL_MECHANISM)")
	fs.StringVar(&s.saslTokenFile, "sasl-token-file", s.saslTokenFile, "OAUTHBEARER: file holding the bearer token (JWT), read again at each call (env SLUICE_SASL_TOKEN_FILE; or the token itself in SLUICE_SASL_TOKEN)")
	fs.StringVar(&s.saslUsername, "sasl-username", s.saslUsername, "the SCRAM user (env SLUICE_SASL_USERNAME)")
	fs.StringVar(&s.saslPasswordFile, "sasl-password-file", s.saslPasswordFile, "file whose first line is the SCRAM password (env SLUICE_SASL_PASSWORD_FILE; or the password itself in SLUICE_SASL_PASSWORD)")
	fs.StringVar(&s.commandConfig, "command-config", s.commandConfig, "file of connection settings, one key=value a line, keys as these flags' names (env SLUICE_COMMAND_CONFIG)")
}

// fromEnv fills s from the environment (before flags, which win).
func (s *security) fromEnv(lookup func(string) (string, bool)) error {
	for key, env := range securityEnv {
		if v, ok := lookup(env); ok {
			if err := s.set(key, v); err != nil {
				return fmt.Errorf("%s: %w", env, err)
			}
		}
	}
	return nil
}

// set sets one setting by its flag name.
func (s *security) set(key, v string) error {
	switch key {
	case "tls":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("tls: want true or false, got %q", v)
		}
		s.tls = b
	case "tls-ca-file":
		s.caFile = v
	case "tls-cert-file":
		s.certFile = v
	case "tls-key-file":
		s.keyFile = v
	case "tls-server-name":
		s.serverName = v
	case "command-config":
		s.commandConfig = v
	case "sasl-mechanism":
		s.saslMechanism = v
	case "sasl-username":
		s.saslUsername = v
	case "sasl-password-file":
		s.saslPasswordFile = v
	case "sasl-password":
		s.saslPassword = v
	case "sasl-token-file":
		s.saslTokenFile = v
	case "sasl-token":
		s.saslToken = v
	default:
		return fmt.Errorf("unknown setting %q", key)
	}
	return nil
}

// applyCommandConfig reads the command config file into s and g (the
// environment and flags, applied after, win). Lines are key=value, keys
// as the flags' names ("brokers" too); blank lines and lines starting
// with '#' are skipped.
func (s *security) applyCommandConfig(g *globals) error {
	if s.commandConfig == "" {
		return nil
	}
	f, err := os.Open(s.commandConfig)
	if err != nil {
		return fmt.Errorf("--command-config: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, v, ok := strings.Cut(text, "=")
		key, v = strings.TrimSpace(key), strings.TrimSpace(v)
		if !ok {
			return fmt.Errorf("--command-config %s:%d: want key=value", s.commandConfig, line)
		}
		if key == "brokers" {
			g.brokers = v
			continue
		}
		if key == "command-config" {
			return fmt.Errorf("--command-config %s:%d: command-config may not name another file", s.commandConfig, line)
		}
		if err := s.set(key, v); err != nil {
			return fmt.Errorf("--command-config %s:%d: %w", s.commandConfig, line, err)
		}
	}
	return sc.Err()
}

// options are the client options the settings ask for.
func (s *security) options() ([]client.Option, error) {
	var opts []client.Option
	if s.tls || s.caFile != "" || s.certFile != "" || s.keyFile != "" || s.serverName != "" || s.saslMechanism != "" {
		cfg, err := client.LoadTLSConfig(s.caFile, s.certFile, s.keyFile)
		if err != nil {
			return nil, err
		}
		cfg.ServerName = s.serverName
		opts = append(opts, client.WithTLS(cfg))
	}
	if s.saslMechanism == "" {
		if s.saslUsername != "" {
			return nil, errors.New("--sasl-username needs --sasl-mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
		return opts, nil
	}
	if s.saslMechanism == "OAUTHBEARER" {
		return append(opts, client.WithBearerToken(s.bearerToken)), nil
	}
	if s.saslUsername == "" {
		return nil, errors.New("--sasl-mechanism needs --sasl-username")
	}
	password := s.saslPassword
	if s.saslPasswordFile != "" {
		p, err := readPasswordFile(s.saslPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--sasl-password-file: %w", err)
		}
		password = p
	}
	if password == "" {
		return nil, errors.New("--sasl-mechanism needs a password: --sasl-password-file, or SLUICE_SASL_PASSWORD")
	}
	return append(opts, client.WithSCRAM(s.saslMechanism, s.saslUsername, password)), nil
}

// readPasswordFile is the first line of a password (or token) file.
func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return firstLine(f, path)
}

// newGlobals is the global settings before the command line is parsed:
// defaults, then the command config file (named by --command-config in
// args or SLUICE_COMMAND_CONFIG), then the environment; flags, parsed
// after, win over all.
func newGlobals(args []string, lookup func(string) (string, bool)) (*globals, error) {
	g := &globals{brokers: "127.0.0.1:9400", output: "text", timeout: 30 * time.Second}
	if path, ok := lookup("SLUICE_COMMAND_CONFIG"); ok {
		g.sec.commandConfig = path
	}
	if path := commandConfigArg(args); path != "" {
		g.sec.commandConfig = path
	}
	if err := g.sec.applyCommandConfig(g); err != nil {
		return nil, err
	}
	if err := g.sec.fromEnv(lookup); err != nil {
		return nil, err
	}
	g.test.fromEnv(lookup)
	if b, ok := lookup("SLUICE_BROKERS"); ok && b != "" {
		g.brokers = b
	}
	return g, nil
}

// commandConfigArg finds --command-config's value in args ("" if none).
func commandConfigArg(args []string) string {
	path := ""
	for i, a := range args {
		if a == "--" {
			break
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "command-config" {
			continue
		}
		if hasValue {
			path = v
		} else if i+1 < len(args) {
			path = args[i+1]
		}
	}
	return path
}

// bearerToken is the OAUTHBEARER token: the file's first line, read again
// each time (a sidecar may renew it), or SLUICE_SASL_TOKEN.
func (s *security) bearerToken(context.Context) (string, error) {
	if s.saslTokenFile != "" {
		tok, err := readPasswordFile(s.saslTokenFile)
		if err != nil {
			return "", fmt.Errorf("--sasl-token-file: %w", err)
		}
		return strings.TrimSpace(tok), nil
	}
	if s.saslToken == "" {
		return "", errors.New("OAUTHBEARER needs a token: --sasl-token-file, or SLUICE_SASL_TOKEN")
	}
	return s.saslToken, nil
}
