module github.com/gpush/gpush

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/chzyer/readline v1.5.1
	github.com/creack/pty v1.1.24
	github.com/gofrs/flock v0.13.2
	github.com/kevinburke/ssh_config v1.6.0
	github.com/pkg/sftp v1.13.12
	github.com/skeema/knownhosts v1.3.3
	github.com/urfave/cli/v2 v2.27.7
	github.com/yuin/gopher-lua v1.1.2
	golang.org/x/crypto v0.59.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/kr/fs v0.1.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)
