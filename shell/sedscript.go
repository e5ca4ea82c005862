package shell

import (
	"fmt"
	"slices"
	"strings"
)

var sedRules = []string{"sed e", "sed w", "sed -f", "sed script"}

// sedLongOpts are GNU sed's long options; the ones in sedLongArg take a
// value ("=v" or the next word).
var (
	sedLongOpts = []string{
		"binary", "regexp-extended", "debug", "expression", "file", "in-place", "line-length", "null-data",
		"zero-terminated", "quiet", "posix", "silent", "sandbox", "separate", "unbuffered", "version", "help",
		"follow-symlinks",
	}
	sedLongArg = []string{"expression", "file", "line-length"}
)

// sedLong resolves a long option the way getopt_long does: the exact name
// or an unambiguous abbreviation.
func sedLong(name string) (string, bool) {
	if slices.Contains(sedLongOpts, name) {
		return name, true
	}
	found := ""
	for _, o := range sedLongOpts {
		if name != "" && strings.HasPrefix(o, name) {
			if found != "" {
				return "", false
			}
			found = o
		}
	}
	return found, found != ""
}

type sedChunk struct {
	text    string
	sandbox bool // --sandbox came before it
}

// sedCheck finds the sed scripts in args (-e, --expression, or the first
// operand) and reports the commands that run a program (e, s///e) or write
// a file (w, W, s///w) other than stdout or stderr. A script file (-f) is
// a miss, and so is a script or an option this parser does not
// understand; --sandbox before every script makes sed refuse e, r and w
// itself.
func sedCheck(args []string) []argHit {
	var chunks []sedChunk
	var operands []string
	sandbox, haveScript := false, false
	notUnderstood := func(what string) []argHit {
		return []argHit{{"sed script", what + " is not understood, so the script is not known"}}
	}
	var hits []argHit
	fromFile := func() {
		haveScript = true
		if !sandbox {
			hits = append(hits, argHit{"sed -f", "the script comes from a file"})
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, value, eq := strings.Cut(a[2:], "=")
			full, ok := sedLong(name)
			if !ok {
				return notUnderstood(fmt.Sprintf("option %q", clip(a)))
			}
			if slices.Contains(sedLongArg, full) && !eq {
				if i+1 >= len(args) {
					return notUnderstood(fmt.Sprintf("option %q without its value", clip(a)))
				}
				i++
				value = args[i]
			}
			switch full {
			case "expression":
				chunks = append(chunks, sedChunk{value, sandbox})
				haveScript = true
			case "file":
				fromFile()
			case "sandbox":
				sandbox = true
			}
		case len(a) > 1 && a[0] == '-':
		cluster:
			for j := 1; j < len(a); j++ {
				switch c := a[j]; c {
				case 'b', 's', 'n', 'r', 'z', 'u', 'E':
				case 'i':
					break cluster // -i[SUFFIX]
				case 'e', 'f', 'l', 'V':
					value := a[j+1:]
					if value == "" {
						if i+1 >= len(args) {
							return notUnderstood(fmt.Sprintf("option -%c without its value", c))
						}
						i++
						value = args[i]
					}
					switch c {
					case 'e':
						chunks = append(chunks, sedChunk{value, sandbox})
						haveScript = true
					case 'f':
						fromFile()
					}
					break cluster
				default:
					return notUnderstood(fmt.Sprintf("option -%c", c))
				}
			}
		default:
			operands = append(operands, a)
		}
	}
	if !haveScript {
		if len(operands) == 0 {
			return hits // sed stops: no script
		}
		chunks = append(chunks, sedChunk{operands[0], sandbox})
	}
	if !slices.ContainsFunc(chunks, func(c sedChunk) bool { return !c.sandbox }) {
		return hits
	}
	texts := make([]string, len(chunks))
	for i, c := range chunks {
		texts[i] = c.text
	}
	// GNU sed compiles the -e scripts as one program, a newline apart.
	return append(hits, sedScript(strings.Join(texts, "\n"))...)
}

// sedScript parses a GNU sed program the way sed's compile.c does and
// returns the hits of its e and w commands and flags. Anything sed would
// reject is a hit of "sed script", and so is a non-ASCII byte, whose
// meaning depends on the locale (a multibyte character can hold a byte
// that reads as a backslash or a delimiter). Like sed 4.3 and later, and
// the BSD seds, it does not end a regex at a delimiter inside a bracket
// expression (s/[^/]*$//).
func sedScript(script string) (hits []argHit) {
	for i := 0; i < len(script); i++ {
		if script[i] >= 0x80 {
			return []argHit{{"sed script", "the script has non-ASCII bytes, which sed reads by the locale"}}
		}
	}
	p := &sedParser{s: script}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(sedError)
			if !ok {
				panic(r)
			}
			hits = append(p.hits, argHit{"sed script", "the script is not understood (" + string(e) + ")"})
		}
	}()
	p.program()
	return p.hits
}

type sedError string

const sedEOF = -1

type sedParser struct {
	s     string
	pos   int
	depth int
	hits  []argHit
}

func (p *sedParser) fail(why string) { panic(sedError(why)) }

func (p *sedParser) in() int {
	if p.pos >= len(p.s) {
		return sedEOF
	}
	p.pos++
	return int(p.s[p.pos-1])
}

func (p *sedParser) unget(ch int) {
	if ch != sedEOF {
		p.pos--
	}
}

func sedBlank(ch int) bool { return ch == ' ' || ch == '\t' }

func sedSpace(ch int) bool { return ch == ' ' || ch >= '\t' && ch <= '\r' }

func sedDigit(ch int) bool { return ch >= '0' && ch <= '9' }

func (p *sedParser) nonblank() int {
	ch := p.in()
	for sedBlank(ch) {
		ch = p.in()
	}
	return ch
}

func (p *sedParser) integer(ch int) {
	for sedDigit(ch) {
		ch = p.in()
	}
	p.unget(ch)
}

func (p *sedParser) endOfCmd() {
	switch ch := p.nonblank(); ch {
	case '}', '#':
		p.unget(ch)
	case sedEOF, '\n', ';':
	default:
		p.fail("extra characters after a command")
	}
}

func (p *sedParser) hit(rule, why string) {
	if !slices.ContainsFunc(p.hits, func(h argHit) bool { return h.rule == rule }) {
		p.hits = append(p.hits, argHit{rule, why})
	}
}

func (p *sedParser) program() {
	for {
		ch := p.in()
		for ch == ';' || sedSpace(ch) {
			ch = p.in()
		}
		if ch == sedEOF {
			break
		}
		if p.address(ch) {
			ch = p.nonblank()
			if ch == ',' {
				if !p.address(p.nonblank()) {
					p.fail("unexpected ','")
				}
				ch = p.nonblank()
			}
		}
		if ch == '!' {
			if ch = p.nonblank(); ch == '!' {
				p.fail("multiple '!'s")
			}
		}
		switch ch {
		case '#':
			for ch != sedEOF && ch != '\n' {
				ch = p.in()
			}
		case 'v':
			p.label()
		case '{':
			p.depth++
		case '}':
			if p.depth--; p.depth < 0 {
				p.fail("unexpected '}'")
			}
			p.endOfCmd()
		case 'e':
			p.hit("sed e", "the e command runs a shell command")
			if ch = p.nonblank(); ch != sedEOF && ch != '\n' {
				p.text(ch)
			}
		case 'a', 'i', 'c':
			ch = p.nonblank()
			if ch == sedEOF {
				p.fail(`expected \ after 'a', 'c' or 'i'`)
			}
			p.text(ch)
		case ':':
			if p.label() == "" {
				p.fail(`":" lacks a label`)
			}
		case 'T', 'b', 't':
			p.label()
		case 'Q', 'q', 'L', 'l':
			if ch = p.nonblank(); sedDigit(ch) {
				p.integer(ch)
			} else {
				p.unget(ch)
			}
			p.endOfCmd()
		case '=', 'd', 'D', 'F', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'z', 'x':
			p.endOfCmd()
		case 'r', 'R':
			if p.filename() == "" {
				p.fail("missing filename")
			}
		case 'w', 'W':
			p.write(p.filename())
		case 's':
			slash := p.in()
			p.slash(slash, true)
			p.slash(slash, false)
			p.substFlags()
		case 'y':
			slash := p.in()
			p.slash(slash, false)
			p.slash(slash, false)
			p.endOfCmd()
		case sedEOF:
			p.fail("missing command")
		default:
			p.fail(fmt.Sprintf("unknown command %q", p.s[p.pos-1:p.pos]))
		}
	}
	if p.depth != 0 {
		p.fail("unmatched '{'")
	}
}

// text skips the text of a, i, c and e: to the end of the line, a
// backslash-newline going on to the next.
func (p *sedParser) text(ch int) {
	if ch == '\\' {
		ch = p.in()
	} else {
		p.unget(ch)
		ch = '\n'
	}
	if ch == sedEOF {
		return
	}
	ch = p.in()
	for ch != sedEOF && ch != '\n' {
		if ch == '\\' {
			ch = p.in()
		}
		if ch == sedEOF {
			return
		}
		ch = p.in()
	}
}

func (p *sedParser) write(name string) {
	switch name {
	case "":
		p.fail("missing filename")
	case "/dev/stdout", "/dev/stderr":
	default:
		p.hit("sed w", fmt.Sprintf("w writes the file %q", clip(name)))
	}
}

func (p *sedParser) label() string {
	ch := p.nonblank()
	if ch == sedEOF {
		return ""
	}
	start := p.pos - 1
	for ch != sedEOF && ch != '\n' && !sedBlank(ch) && ch != ';' && ch != '}' && ch != '#' {
		ch = p.in()
	}
	p.unget(ch)
	return p.s[start:p.pos]
}

// filename reads the rest of the line (r, R, w, W and s///w).
func (p *sedParser) filename() string {
	ch := p.nonblank()
	if ch == sedEOF {
		return ""
	}
	start := p.pos - 1
	for ch != sedEOF && ch != '\n' {
		ch = p.in()
	}
	end := p.pos
	if ch == '\n' {
		end--
	}
	return p.s[start:end]
}

// address reads an address starting with ch, or reads nothing and
// returns false.
func (p *sedParser) address(ch int) bool {
	switch {
	case ch == '/' || ch == '\\':
		if ch == '\\' {
			ch = p.in()
		}
		p.slash(ch, true)
		for {
			if ch = p.nonblank(); ch != 'I' && ch != 'M' {
				p.unget(ch)
				return true
			}
		}
	case sedDigit(ch):
		p.integer(ch)
		if ch = p.nonblank(); ch == '~' {
			p.integer(p.nonblank())
		} else {
			p.unget(ch)
		}
	case ch == '+' || ch == '~':
		p.integer(p.nonblank())
	case ch == '$':
	default:
		return false
	}
	return true
}

// slash reads up to the delimiter slash: a regex or a replacement.
func (p *sedParser) slash(slash int, regex bool) {
	if slash == sedEOF || slash == '\n' || slash == '\\' {
		p.fail("bad delimiter")
	}
	for {
		ch := p.in()
		switch {
		case ch == sedEOF || ch == '\n':
			p.fail("unterminated regex or replacement")
		case ch == slash:
			return
		case ch == '\\':
			if p.in() == sedEOF {
				p.fail("unterminated regex or replacement")
			}
		case ch == '[' && regex:
			if p.bracket() != ']' {
				p.fail("unterminated bracket expression")
			}
		}
	}
}

// bracket skips a bracket expression after its "[", as sed's
// snarf_char_class does, and returns the character that ended it.
func (p *sedParser) bracket() int {
	ch := p.in()
	if ch == '^' {
		ch = p.in()
	}
	if ch == ']' {
		ch = p.in()
	}
	state, delim := 0, 0
	for ; ; ch = p.in() {
		switch ch {
		case sedEOF, '\n':
			return ch
		case '.', ':', '=':
			if state == 1 {
				delim, state = ch, 2
				continue
			} else if state == 2 && ch == delim {
				state = 3
				continue
			}
		case '[':
			if state == 0 {
				state = 1
			}
			continue
		case ']':
			switch state {
			case 0, 1:
				return ch
			case 3:
				state = 0
			}
		}
		state &^= 1
	}
}

func (p *sedParser) substFlags() {
	for {
		switch ch := p.nonblank(); {
		case ch == 'i' || ch == 'I' || ch == 'm' || ch == 'M' || ch == 'p' || ch == 'g':
		case ch == 'e':
			p.hit("sed e", "the e flag of s runs the result as a shell command")
		case ch == 'w':
			p.write(p.filename())
			return
		case sedDigit(ch):
			p.integer(ch)
		case ch == '}' || ch == '#':
			p.unget(ch)
			return
		case ch == sedEOF || ch == '\n' || ch == ';':
			return
		case ch == '\r':
			if p.in() == '\n' {
				return
			}
			p.fail("unknown option to s")
		default:
			p.fail("unknown option to s")
		}
	}
}
