package shell

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ruleBins are allowlisted in setupArgRules: binaries with argument
// rules, and rev, which has none.
var ruleBins = []string{
	"git", "tar", "sed", "vim", "ex", "nvim", "view", "emacs", "man", "less", "rsync", "ssh", "scp", "sftp",
	"zip", "make", "ninja", "cmake", "npm", "yarn", "pnpm", "pip", "pip3", "pip3.12", "npx", "pipx", "cargo",
	"go", "split", "wget", "openssl", "gcc", "gcc-12", "x86_64-linux-gnu-gcc-12", "cc", "clang", "groff",
	"ed", "dc", "ftp", "rev",
}

// setupArgRules is setupPolicy with ruleBins (and find and sort, which
// are no longer safe bins) allowlisted, plus vi and mygit, links to vim
// and git.
func setupArgRules(tb testing.TB) *policyBundle {
	tb.Helper()
	b := setupPolicy(tb)
	for _, n := range ruleBins {
		//nolint:gosec // G306: a fake executable must have its exec bits; the temp dir is private
		require.NoError(tb, os.WriteFile(filepath.Join(b.bin, n), []byte("#!/bin/sh\n"), 0o755))
	}
	require.NoError(tb, os.Symlink(filepath.Join(b.bin, "vim"), filepath.Join(b.bin, "vi")))
	require.NoError(tb, os.Symlink(filepath.Join(b.bin, "git"), filepath.Join(b.bin, "mygit")))
	for _, n := range append(ruleBins, "vi", "mygit", "find", "sort") {
		b.policy.Allowlist = append(b.policy.Allowlist, filepath.Join(b.bin, n))
	}
	b.policy.SafeBins = nil
	require.NoError(tb, b.policy.Validate())
	return b
}

// TestArgRules: an allowlisted binary whose arguments make it run another
// program (or write where its entry does not vouch for) is a miss that
// names the rule; the harmless forms pass.
func TestArgRules(t *testing.T) {
	t.Parallel()
	b := setupArgRules(t)
	cases := []struct {
		cmd  string
		rule string // "" means the command passes
	}{
		// git: global options, then the subcommand.
		{cmd: "git status"},
		{cmd: "git log --oneline"},
		{cmd: "git log --oneline -n 5 -- -c"},
		{cmd: "git diff HEAD~1"},
		{cmd: "git -C /tmp status"},
		{cmd: "git --no-pager log"},
		{cmd: "git --git-dir=/x/.git log"},
		{cmd: "git --git-dir /x/.git --work-tree /x log"},
		{cmd: "git --exec-path"},
		{cmd: "git --version"},
		{cmd: "git --help"},
		{cmd: "git help log"},
		{cmd: "git"},
		{cmd: "git show HEAD:README.md"},
		{cmd: "git branch -a"},
		{cmd: "git switch -c feature"},
		{cmd: "git checkout -b feature"},
		{cmd: "git commit -m 'x -c y'"},
		{cmd: "git cherry-pick -x abc123"},
		{cmd: "git fetch origin"},
		{cmd: "git clone --depth 1 https://example.com/r.git"},
		{cmd: "git clone -b main -q https://example.com/r.git"},
		{cmd: "git grep -n -e foo"},
		{cmd: "git rebase main"},
		{cmd: "git bisect start"},
		{cmd: "git submodule update --init"},
		{cmd: "git config --get user.name"},
		{cmd: "git config user.name"},
		{cmd: "git config --list"},
		{cmd: "git config -l --show-origin"},
		{cmd: "git config --global --get user.email"},
		{cmd: "git config --get-regexp 'alias.*'"},
		{cmd: "git config get --all user.name"},
		{cmd: "git -c core.pager=less log", rule: "git -c"},
		{cmd: "git -c core.sshCommand='sh -c id' fetch", rule: "git -c"},
		{cmd: "git -c alias.x='!sh -c id' x", rule: "git -c"},
		{cmd: "git -ccore.pager=less log", rule: "git -c"},
		{cmd: "git -C /tmp -c core.fsmonitor=x status", rule: "git -c"},
		{cmd: "mygit -c core.pager=less log", rule: "git -c"},
		{cmd: "git --config-env=core.pager=X log", rule: "git --config-env"},
		{cmd: "git --config-env core.pager=X log", rule: "git --config-env"},
		{cmd: "git --exec-path=/tmp log", rule: "git --exec-path"},
		{cmd: "git --frobnicate log", rule: "git option"},
		{cmd: "git lg", rule: "git alias"},
		{cmd: "git upload-pack .", rule: "git alias"},
		{cmd: "git fetch --upload-pack='sh -c id' origin", rule: "git --upload-pack"},
		{cmd: "git fetch --upload-pack x origin", rule: "git --upload-pack"},
		{cmd: "git fetch --upl=x origin", rule: "git --upload-pack"},
		{cmd: "git ls-remote --upload-pack=x origin", rule: "git --upload-pack"},
		{cmd: "git clone -u x https://example.com/r.git", rule: "git --upload-pack"},
		{cmd: "git clone -qu x https://example.com/r.git", rule: "git --upload-pack"},
		{cmd: "git push --receive-pack=x origin", rule: "git --receive-pack"},
		{cmd: "git push --exec=x origin", rule: "git --exec"},
		{cmd: "git archive --exec=x --remote=o HEAD", rule: "git --exec"},
		{cmd: "git rebase --exec 'make test' main", rule: "git --exec"},
		{cmd: "git rebase --exe='sh -c id' main", rule: "git --exec"},
		{cmd: "git rebase -x make main", rule: "git --exec"},
		{cmd: "git rebase -ix make main", rule: "git --exec"},
		{cmd: "git rebase -xmake main", rule: "git --exec"},
		{cmd: "git difftool -x sh", rule: "git difftool"},
		{cmd: "git difftool", rule: "git difftool"},
		{cmd: "git mergetool", rule: "git mergetool"},
		{cmd: "git filter-branch --tree-filter id", rule: "git filter-branch"},
		{cmd: "git bisect run ./test.sh", rule: "git bisect run"},
		{cmd: "git submodule foreach id", rule: "git submodule foreach"},
		{cmd: "git submodule --quiet foreach id", rule: "git submodule foreach"},
		{cmd: "git hook run pre-commit", rule: "git hook"},
		{cmd: "git for-each-repo --config=x -- -c core.pager=x log", rule: "git for-each-repo"},
		{cmd: "git maintenance start", rule: "git maintenance"},
		{cmd: "git send-email x.patch", rule: "git send-email"},
		{cmd: "git instaweb", rule: "git instaweb"},
		{cmd: "git daemon --access-hook=x", rule: "git daemon"},
		{cmd: "git config core.pager less", rule: "git config"},
		{cmd: "git config --global core.sshCommand x", rule: "git config"},
		{cmd: "git config set core.pager less", rule: "git config"},
		{cmd: "git config --add alias.x '!id'", rule: "git config"},
		{cmd: "git config --edit", rule: "git config"},
		{cmd: "git config -e", rule: "git config"},
		{cmd: "git config --file=x core.pager less", rule: "git config"},
		{cmd: "git clone -c core.fsmonitor=x https://example.com/r.git", rule: "git clone --config"},
		{cmd: "git clone --config core.fsmonitor=x https://example.com/r.git", rule: "git clone --config"},
		{cmd: "git clone --template=/tmp/t https://example.com/r.git", rule: "git --template"},
		{cmd: "git init --template /tmp/t", rule: "git --template"},
		{cmd: "git grep -O foo", rule: "git grep -O"},
		{cmd: "git grep -nOvim foo", rule: "git grep -O"},
		{cmd: "git grep --open-files-in-pager=vim foo", rule: "git grep -O"},

		// tar.
		{cmd: "tar -tf x.tar"},
		{cmd: "tar -xf x.tar"},
		{cmd: "tar -xzf x.tgz -C out"},
		{cmd: "tar -czvf out.tgz dir"},
		{cmd: "tar tf x.tar"},
		{cmd: "tar xvf x.tar"},
		{cmd: "tar --list --file=x.tar"},
		{cmd: "tar -xf x.tar --to-stdout"},
		{cmd: "tar --checkpoint=10 -xf x.tar"},
		{cmd: "tar -xf ./host:x.tar"},
		{cmd: "tar -xf host:x.tar --force-local"},
		{cmd: "tar -cfImage.tar dir"},
		{cmd: "tar -xf x.tar --to-command=sh", rule: "tar --to-command"},
		{cmd: "tar -xf x.tar --to-command sh", rule: "tar --to-command"},
		{cmd: "tar --to-com=sh -xf x.tar", rule: "tar --to-command"},
		{cmd: "tar -xf x.tar --checkpoint=1 --checkpoint-action=exec=id", rule: "tar --checkpoint-action"},
		{cmd: "tar --use-compress-program=sh -xf x.tar", rule: "tar --use-compress-program"},
		{cmd: "tar -I sh -xf x.tar", rule: "tar --use-compress-program"},
		{cmd: "tar -xIsh -f x.tar", rule: "tar --use-compress-program"},
		{cmd: "tar xIf sh x.tar", rule: "tar --use-compress-program"},
		{cmd: "tar --info-script=x -cf y.tar dir", rule: "tar --info-script"},
		{cmd: "tar -F x -cf y.tar dir", rule: "tar --info-script"},
		{cmd: "tar --new-volume-script=x -cf y.tar dir", rule: "tar --info-script"},
		{cmd: "tar --rsh-command=/tmp/x -xf y.tar", rule: "tar --rsh-command"},
		{cmd: "tar --rmt-command=/tmp/x -xf y.tar", rule: "tar --rsh-command"},
		{cmd: "tar -xf host:x.tar", rule: "tar remote archive"},
		{cmd: "tar xf host:x.tar", rule: "tar remote archive"},
		{cmd: "tar -x --file=host:/x.tar", rule: "tar remote archive"},
		{cmd: "tar -x --file host:/x.tar", rule: "tar remote archive"},
		{cmd: "tar -xfhost:x.tar", rule: "tar remote archive"},

		// sed.
		{cmd: "sed s/a/b/"},
		{cmd: "sed -n 's/foo/bar/p'"},
		{cmd: "sed -e 's/a/b/g' -e /x/d"},
		{cmd: "sed 's/[^/]*$//'"},
		{cmd: "sed -E 's/(a|b)+/x/g'"},
		{cmd: "sed '1d;$d'"},
		{cmd: "sed -n 2,5p"},
		{cmd: "sed y/abc/xyz/"},
		{cmd: "sed '/start/,/end/{s/a/b/;p}'"},
		{cmd: `sed ':a;N;$!ba;s/\n/ /g'`},
		{cmd: "sed 's/a/b/w /dev/stdout'"},
		{cmd: "sed -i 's/a/b/' f"},
		{cmd: "sed -i.bak 's/a/b/' f"},
		{cmd: "sed --expression='s/x/y/'"},
		{cmd: "sed --expr 's/x/y/'"},
		{cmd: "sed 'a hello; e id'"},
		{cmd: "sed 's/e/w/'"},
		{cmd: "sed /w/p"},
		{cmd: "sed 'r /etc/hosts'"},
		{cmd: "sed '#e id'"},
		{cmd: "sed -ns p"},
		{cmd: "sed --sandbox 'e id'"},
		{cmd: "sed 's/x/y/;# e id'"},
		{cmd: "sed e", rule: "sed e"},
		{cmd: "sed 'e id'", rule: "sed e"},
		{cmd: "sed '1e id'", rule: "sed e"},
		{cmd: "sed '$!e id'", rule: "sed e"},
		{cmd: "sed 's/x/id/e'", rule: "sed e"},
		{cmd: "sed 's/x/id/ge'", rule: "sed e"},
		{cmd: "sed 's|x|id|2e'", rule: "sed e"},
		{cmd: "sed -e p -e 'e id'", rule: "sed e"},
		{cmd: "sed -n -e p -ee", rule: "sed e"},
		{cmd: "sed 'p;e'", rule: "sed e"},
		{cmd: "sed -e '/x/{e id' -e '}'", rule: "sed e"},
		{cmd: "sed '/x/{e id' -e '}'", rule: "sed script"}, // with -e, the first operand is a file
		{cmd: "sed 's/[/]/x/;e id'", rule: "sed e"},
		{cmd: "sed -e 'e id' --sandbox", rule: "sed e"},
		{cmd: "sed -n p -- 'e id'"},
		{cmd: "sed -- 'e id'", rule: "sed e"},
		{cmd: "sed 'w out'", rule: "sed w"},
		{cmd: "sed 's/a/b/w out'", rule: "sed w"},
		{cmd: "sed '/x/W out'", rule: "sed w"},
		{cmd: "sed 's/a/b/;w x'", rule: "sed w"},
		{cmd: "sed -f script.sed", rule: "sed -f"},
		{cmd: "sed --file=script.sed", rule: "sed -f"},
		{cmd: "sed -nf script.sed", rule: "sed -f"},
		{cmd: "sed 's/a/b'", rule: "sed script"},
		{cmd: "sed k", rule: "sed script"},
		{cmd: "sed --frob p", rule: "sed script"},
		{cmd: "sed -Z p", rule: "sed script"},
		{cmd: "sed 's/é/e/'", rule: "sed script"},
		{cmd: "sed '1!!p'", rule: "sed script"},
		{cmd: "sed '1{p'", rule: "sed script"},

		// Editors, pagers, man.
		{cmd: "vim --version"},
		{cmd: "vi --version"},
		{cmd: "emacs --version"},
		{cmd: "vim file", rule: "vim"},
		{cmd: "vim -c '!id'", rule: "vim"},
		{cmd: "vim +'!id'", rule: "vim"},
		{cmd: "vim -S x.vim", rule: "vim"},
		{cmd: "vi", rule: "vim"},
		{cmd: "ex -c q", rule: "vim"},
		{cmd: "nvim --headless", rule: "vim"},
		{cmd: "view x", rule: "vim"},
		{cmd: "emacs --batch --eval '(shell-command \"id\")'", rule: "emacs"},
		{cmd: "ed", rule: "ed"},
		{cmd: "dc", rule: "dc"},
		{cmd: "less -R"},
		{cmd: "less -N -S"},
		{cmd: "less -Pfoo"},
		{cmd: "less +!id", rule: "less +cmd"},
		{cmd: "less +F", rule: "less +cmd"},
		{cmd: "less -o out", rule: "less --log-file"},
		{cmd: "less -ROout", rule: "less --log-file"},
		{cmd: "less --log-file=out", rule: "less --log-file"},
		{cmd: "less --log=out", rule: "less --log-file"},
		{cmd: "less -k keys", rule: "less --lesskey"},
		{cmd: "less --lesskey-src=x", rule: "less --lesskey"},
		{cmd: "man ls"},
		{cmd: "man -k printf"},
		{cmd: "man 3 printf"},
		{cmd: "man -P 'sh -c id' ls", rule: "man --pager"},
		{cmd: "man --pager=cat ls", rule: "man --pager"},
		{cmd: "man -Pcat ls", rule: "man --pager"},
		{cmd: "man -Hfirefox ls", rule: "man --html"},
		{cmd: "man --html ls", rule: "man --html"},
		{cmd: "man -C /tmp/c ls", rule: "man --config-file"},
		{cmd: "man -X ls", rule: "man --gxditview"},

		// find.
		{cmd: "find . -name '*.go'"},
		{cmd: "find . -type f -print0"},
		{cmd: "find . -exec rm '{}' ';'", rule: "find -exec"},
		{cmd: "find . -execdir x ';'", rule: "find -exec"},
		{cmd: "find . -ok rm '{}' ';'", rule: "find -exec"},
		{cmd: "find . -okdir rm '{}' ';'", rule: "find -exec"},
		{cmd: "find . -delete", rule: "find -delete"},
		{cmd: "find . -fprint out", rule: "find -fprint"},
		{cmd: "find . -fprintf out %p", rule: "find -fprint"},
		{cmd: "find . -fls out", rule: "find -fprint"},

		// Remote copies and shells.
		{cmd: "rsync -av src/ dst/"},
		{cmd: "rsync -avz --exclude=x a b"},
		{cmd: "rsync -a host:src dst"},
		{cmd: "rsync -e 'sh -c id' a b", rule: "rsync --rsh"},
		{cmd: "rsync -avze ssh a b", rule: "rsync --rsh"},
		{cmd: "rsync --rsh=x a b", rule: "rsync --rsh"},
		{cmd: "rsync --rsync-path='sh -c id' a host:b", rule: "rsync --rsync-path"},
		{cmd: "rsync -M--x a b", rule: "rsync --remote-option"},
		{cmd: "rsync --daemon", rule: "rsync --daemon"},
		{cmd: "ssh host uptime"},
		{cmd: "ssh -p 2222 host"},
		{cmd: "ssh -o BatchMode=yes host"},
		{cmd: "ssh -oConnectTimeout=5 host"},
		{cmd: "ssh -i key -o 'StrictHostKeyChecking no' host"},
		{cmd: "ssh -o ProxyCommand='sh -c id' host", rule: "ssh -o"},
		{cmd: "ssh -oProxyCommand=x host", rule: "ssh -o"},
		{cmd: "ssh -o 'LocalCommand id' -o PermitLocalCommand=yes host", rule: "ssh -o"},
		{cmd: "ssh -vo ProxyCommand=x host", rule: "ssh -o"},
		{cmd: "ssh -o KnownHostsCommand=x host", rule: "ssh -o"},
		{cmd: "ssh host -o ProxyCommand=x", rule: "ssh -o"},
		{cmd: "ssh -F cfg host", rule: "ssh -F"},
		{cmd: "ssh -I lib.so host", rule: "ssh -I"},
		{cmd: "scp a host:b"},
		{cmd: "scp -P 22 -o BatchMode=yes a host:b"},
		{cmd: "scp -S x a host:b", rule: "scp -S"},
		{cmd: "scp -D /tmp/x a host:b", rule: "scp -S"},
		{cmd: "scp -o ProxyCommand=x a host:b", rule: "scp -o"},
		{cmd: "scp -F cfg a host:b", rule: "scp -F"},
		{cmd: "sftp host", rule: "sftp"},
		{cmd: "ftp host", rule: "ftp"},
		{cmd: "wget https://example.com/"},
		{cmd: "wget -O out https://example.com/"},
		{cmd: "wget -qO- https://example.com/"},
		{cmd: "wget -e use_askpass=x https://example.com/", rule: "wget --execute"},
		{cmd: "wget --execute=x https://example.com/", rule: "wget --execute"},
		{cmd: "wget --config=x https://example.com/", rule: "wget --execute"},
		{cmd: "wget --use-askpass=x https://example.com/", rule: "wget --use-askpass"},

		// Archivers and filters.
		{cmd: "zip -r out.zip dir"},
		{cmd: "zip -9 out.zip f"},
		{cmd: "zip -T out.zip f", rule: "zip -T"},
		{cmd: "zip -TT 'sh -c id' out.zip f", rule: "zip -T"},
		{cmd: "zip -rT out.zip d", rule: "zip -T"},
		{cmd: "zip --unzip-command=x -T out.zip f", rule: "zip -T"},
		{cmd: "sort -u f"},
		{cmd: "sort --compress-program=sh f", rule: "sort --compress-program"},
		{cmd: "sort --compress-prog=sh -S 1 f", rule: "sort --compress-program"},
		{cmd: "split -l 10 f"},
		{cmd: "split --filter='sh -c id' f", rule: "split --filter"},
		{cmd: "openssl sha256 f"},
		{cmd: "openssl x509 -in c -noout -text"},
		{cmd: "openssl req -engine x.so", rule: "openssl -engine"},
		{cmd: "openssl dgst -provider-path /tmp -provider x f", rule: "openssl -engine"},
		{cmd: "groff -man -Tascii"},
		{cmd: "groff -U -man", rule: "groff -U"},
		{cmd: "rev --anything -e x"},

		// Build tools and package managers.
		{cmd: "make --version"},
		{cmd: "make", rule: "make"},
		{cmd: "make test", rule: "make"},
		{cmd: "make -n", rule: "make"},
		{cmd: "ninja", rule: "ninja"},
		{cmd: "cmake --version"},
		{cmd: "cmake -P x.cmake", rule: "cmake"},
		{cmd: "gcc -O2 -o out main.c"},
		{cmd: "gcc-12 -c x.c"},
		{cmd: "gcc -wrapper sh,-c,id x.c", rule: "cc -wrapper"},
		{cmd: "gcc -B/tmp x.c", rule: "cc -B"},
		{cmd: "gcc -fplugin=./p.so x.c", rule: "cc -fplugin"},
		{cmd: "gcc @opts", rule: "cc @file"},
		{cmd: "gcc -Wl,-plugin,x.so x.c", rule: "cc -Wl"},
		{cmd: "gcc -specs=x x.c", rule: "cc -specs"},
		{cmd: "x86_64-linux-gnu-gcc-12 -B/tmp x.c", rule: "cc -B"},
		{cmd: "cc -fuse-ld=/tmp/ld x.c", rule: "cc -fuse-ld"},
		{cmd: "clang -Xclang -load -Xclang x.so x.c", rule: "cc -Wl"},
		{cmd: "npm ls"},
		{cmd: "npm view react version"},
		{cmd: "npm outdated"},
		{cmd: "npm config get registry"},
		{cmd: "npm audit"},
		{cmd: "npm --version"},
		{cmd: "npm version --json"},
		{cmd: "npm", rule: "npm scripts"},
		{cmd: "npm run build", rule: "npm scripts"},
		{cmd: "npm test", rule: "npm scripts"},
		{cmd: "npm start", rule: "npm scripts"},
		{cmd: "npm install", rule: "npm scripts"},
		{cmd: "npm i left-pad", rule: "npm scripts"},
		{cmd: "npm ci", rule: "npm scripts"},
		{cmd: "npm exec cowsay", rule: "npm scripts"},
		{cmd: "npm x cowsay", rule: "npm scripts"},
		{cmd: "npm audit fix", rule: "npm scripts"},
		{cmd: "npm config set script-shell /tmp/x", rule: "npm scripts"},
		{cmd: "npm --prefix ls run build", rule: "npm scripts"},
		{cmd: "npm explore left-pad", rule: "npm scripts"},
		{cmd: "npm version patch", rule: "npm scripts"},
		{cmd: "yarn info react"},
		{cmd: "yarn --version"},
		{cmd: "yarn", rule: "yarn scripts"},
		{cmd: "yarn build", rule: "yarn scripts"},
		{cmd: "yarn run test", rule: "yarn scripts"},
		{cmd: "yarn dlx cowsay", rule: "yarn scripts"},
		{cmd: "pnpm ls"},
		{cmd: "pnpm install", rule: "pnpm scripts"},
		{cmd: "pnpm audit --fix", rule: "pnpm scripts"},
		{cmd: "pip list"},
		{cmd: "pip show requests"},
		{cmd: "pip3 freeze"},
		{cmd: "pip3.12 list"},
		{cmd: "pip install requests", rule: "pip install"},
		{cmd: "pip download requests", rule: "pip install"},
		{cmd: "pip wheel .", rule: "pip install"},
		{cmd: "pip3 install -e .", rule: "pip install"},
		{cmd: "pip3.12 install x", rule: "pip install"},
		{cmd: "npx --version"},
		{cmd: "npx cowsay", rule: "npx"},
		{cmd: "pipx run cowsay", rule: "npx"},
		{cmd: "cargo --version"},
		{cmd: "cargo tree"},
		{cmd: "cargo build", rule: "cargo build"},
		{cmd: "cargo test", rule: "cargo build"},
		{cmd: "cargo +nightly tree", rule: "cargo build"},
		{cmd: "go version"},
		{cmd: "go env GOPATH"},
		{cmd: "go doc fmt"},
		{cmd: "go mod graph"},
		{cmd: "go build ./...", rule: "go build"},
		{cmd: "go test ./...", rule: "go build"},
		{cmd: "go generate ./...", rule: "go build"},
		{cmd: "go run .", rule: "go build"},
		{cmd: "go env -w GOFLAGS=-toolexec=x", rule: "go build"},
		{cmd: "go env --u=GOFLAGS", rule: "go build"},
		{cmd: "go mod download", rule: "go build"},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			in := &Input{Command: tc.cmd}
			in.ApplyDefaults()
			d := Evaluate(b.policy, in)
			if tc.rule == "" {
				require.Equal(t, Allow, d.Outcome, "reason: %s", d.Reason)
				return
			}
			require.Equal(t, NeedsApproval, d.Outcome)
			require.Contains(t, d.Reason, `argument rule "`+tc.rule+`"`)
			require.Contains(t, d.Reason, "argAllow", "the reason says how to allow it")
			require.Empty(t, d.Unlisted, "an allowlisted binary is not what an always approval would add")
			require.True(t, knownArgRules[tc.rule], "rule %q is registered", tc.rule)
		})
	}
}

// TestArgRulesOnlyForAllowlisted: a binary that is not allowlisted is an
// ordinary miss; the argument rules are about what an entry vouches for.
func TestArgRulesOnlyForAllowlisted(t *testing.T) {
	t.Parallel()
	b := setupArgRules(t)
	p := b.policy
	p.Allowlist = nil
	in := &Input{Command: "git -c core.pager=less log"}
	in.ApplyDefaults()
	d := Evaluate(p, in)
	require.Equal(t, NeedsApproval, d.Outcome)
	require.Contains(t, d.Reason, "git is not on the allowlist")
	require.Equal(t, []string{filepath.Join(b.bin, "git")}, d.Unlisted)
}

// TestArgAllow: the operator's per-binary waivers let a named form pass
// for that binary only, never a wrapper.
func TestArgAllow(t *testing.T) {
	t.Parallel()
	b := setupArgRules(t)
	git, tar, mk := filepath.Join(b.bin, "git"), filepath.Join(b.bin, "tar"), filepath.Join(b.bin, "make")
	p := b.policy
	p.ArgAllow = []ArgAllow{
		{Path: git, Rules: []string{"git -c"}},
		{Path: tar, Rules: []string{"tar --to-command"}},
		{Path: mk, Rules: []string{"*"}},
		{Path: filepath.Join(b.other, "ls"), Rules: []string{"*"}},
	}
	require.NoError(t, p.Validate())
	cases := []struct {
		cmd  string
		rule string
	}{
		{cmd: "git -c color.ui=always log"},
		{cmd: "git -c x=y difftool", rule: "git difftool"},
		{cmd: "git --config-env=core.pager=X log", rule: "git --config-env"},
		{cmd: "mygit -c x=y log", rule: "git -c"}, // the waiver is for the git path only
		{cmd: "tar -xf x.tar --to-command=sh"},
		{cmd: "tar -I sh -xf x.tar", rule: "tar --use-compress-program"},
		{cmd: "make test"},
		{cmd: "make"},
		{cmd: "find . -exec rm '{}' ';'", rule: "find -exec"},
	}
	for _, tc := range cases {
		in := &Input{Command: tc.cmd}
		in.ApplyDefaults()
		d := Evaluate(p, in)
		if tc.rule == "" {
			require.Equal(t, Allow, d.Outcome, "%s: %s", tc.cmd, d.Reason)
			continue
		}
		require.Equal(t, NeedsApproval, d.Outcome, tc.cmd)
		require.Contains(t, d.Reason, `argument rule "`+tc.rule+`"`, tc.cmd)
	}

	// A waiver cannot make a wrapper pass, even if Validate is skipped.
	w := b.policy
	w.ArgAllow = []ArgAllow{{Path: filepath.Join(b.bin, "xargs"), Rules: []string{"*"}}}
	require.Error(t, w.Validate())
	in := &Input{Command: "ls | xargs rm"}
	in.ApplyDefaults()
	require.Equal(t, NeedsApproval, Evaluate(w, in).Outcome)

	bad := []ArgAllow{
		{Path: "git", Rules: []string{"git -c"}},
		{Path: git},
		{Path: git, Rules: []string{"git -x"}},
		{Path: git, Rules: []string{""}},
		{Path: filepath.Join(b.bin, "env"), Rules: []string{"*"}},
	}
	for _, a := range bad {
		q := b.policy
		q.ArgAllow = []ArgAllow{a}
		require.Error(t, q.Validate(), "%+v", a)
	}
	q := b.policy
	q.SafeBins = []string{"git"}
	require.Error(t, q.Validate(), "a binary with argument rules is no safe bin")
	q.SafeBins = []string{"sort"}
	require.NoError(t, q.Validate(), "sort's safe-bin profile already excludes --compress-program")
}

// FuzzArgRules feeds random argvs to every argument rule and random
// scripts to the sed parser: none may panic, and an argv never hits a rule
// its spec does not declare (so ArgAllow can name every hit).
func FuzzArgRules(f *testing.F) {
	for _, s := range []string{
		"-c core.pager=x log", "-xf x.tar --to-command=sh", "s/a/b/e", "-e p -e e", "-n", "--", "-",
		"-o ProxyCommand=x host", "run build", "-exec rm {} ;", "1{/x/!{e id\n}}", "y/a/", "s/[[:alpha:]/]/x/w f",
		"--file=h:x", "xIf", "config --get x", "a\\", ":a;ta", "$!N", "--sandbox", "-i", "-Pcat", "+!id",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Fields(s)
		for name, spec := range argRules {
			for _, h := range spec.check(args) {
				require.Contains(t, spec.rules, h.rule, "%s %q", name, args)
				require.NotEmpty(t, h.why)
			}
		}
		for _, h := range sedScript(s) {
			require.Contains(t, sedRules, h.rule)
		}
	})
}
