package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// scriptName is the file name QuickJS gives the run's script in stack
// frames; guestName is the one the guest's own code is reported under.
const (
	scriptName = "exec.js"
	guestJS    = "code.js"
	guestTS    = "code.ts"
)

// maxFrames bounds the stack frames kept in a failed run's error.
const maxFrames = 10

// positions maps a line and column of the script QuickJS runs back to the
// guest's code. JavaScript runs as written inside the one-line wrapper, so
// its lines are off by one; TypeScript runs as esbuild's output, whose
// source map (the VLQ mappings, against the wrapped TypeScript) is kept
// here. It travels in the snapshot, so a run that fails after a resume
// reports the guest's positions too.
type positions struct {
	// TypeScript is set when Mappings apply.
	TypeScript bool `json:"ts,omitempty"`
	// Lines is the number of lines of the guest's code; a position past it
	// is the wrapper's closing line, i.e. the end of the code.
	Lines    int    `json:"lines,omitempty"`
	LastCol  int    `json:"lastCol,omitempty"`
	Mappings string `json:"mappings,omitempty"`

	decoded [][]mapping
}

// mapping is one segment of a source map line: generated column to the
// original line and column (all 0-based).
type mapping struct{ genCol, line, col int }

func newPositions(src string, ts bool, mappings string) *positions {
	lines := strings.Split(src, "\n")
	return &positions{
		TypeScript: ts, Lines: len(lines), LastCol: utf8.RuneCountInString(lines[len(lines)-1]) + 1,
		Mappings: mappings,
	}
}

func (p *positions) file() string {
	if p != nil && p.TypeScript {
		return guestTS
	}
	return guestJS
}

// wrapped maps a 1-based line and column of the wrapped source (what
// esbuild parsed, or the JavaScript QuickJS runs) to the guest's code; end
// reports a position on the wrapper's closing line, given as the end of the
// guest's last line.
func (p *positions) wrapped(line, col int) (gline, gcol int, end bool) {
	gline = line - 1
	if p != nil && p.Lines > 0 && gline > p.Lines {
		return p.Lines, p.LastCol, true
	}
	if gline < 1 {
		return 1, 1, false
	}
	return gline, max(col, 1), false
}

// source maps a position of the wrapped source the guest wrote.
func (p *positions) source(line, col int) (gline, gcol int, end, ok bool) {
	gline, gcol, end = p.wrapped(line, col)
	return gline, gcol, end, line > 1 || end
}

// script maps a 1-based line and column of the script QuickJS ran (or the
// loader check parsed) to the guest's code; ok is false when the position
// is not in the guest's code.
func (p *positions) script(line, col int) (gline, gcol int, end, ok bool) {
	if p == nil || !p.TypeScript {
		return p.source(line, col)
	}
	if p.decoded == nil {
		p.decoded = decodeMappings(p.Mappings)
	}
	if line < 1 || line > len(p.decoded) || len(p.decoded[line-1]) == 0 {
		return 0, 0, false, false
	}
	segs := p.decoded[line-1]
	best := 0
	for i, s := range segs {
		if s.genCol <= col-1 {
			best = i
		}
	}
	gline, gcol, end = p.wrapped(segs[best].line+1, segs[best].col+1)
	return gline, gcol, end, segs[best].line > 0 || end
}

// decodeMappings decodes a source map's mappings string (version 3).
func decodeMappings(s string) [][]mapping {
	var (
		out        [][]mapping
		line, col  int
		fields     [5]int
		genCol     int
		cur        []mapping
		shift      int
		value      int
		fieldCount int
	)
	flushSeg := func() {
		if fieldCount >= 4 {
			line += fields[2]
			col += fields[3]
			cur = append(cur, mapping{genCol: fields[0], line: line, col: col})
		}
		fieldCount = 0
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ';':
			flushSeg()
			out = append(out, cur)
			cur, genCol = nil, 0
			continue
		case ',':
			flushSeg()
			continue
		}
		d := strings.IndexByte(base64VLQ, c)
		if d < 0 {
			return out
		}
		value |= (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			continue
		}
		v := value >> 1
		if value&1 != 0 {
			v = -v
		}
		value, shift = 0, 0
		if fieldCount == 0 {
			genCol += v
			fields[0] = genCol
		} else if fieldCount < len(fields) {
			fields[fieldCount] = v
		}
		fieldCount++
	}
	flushSeg()
	return append(out, cur)
}

const base64VLQ = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

var frameRE = regexp.MustCompile(`exec\.js:(\d+):(\d+)`)

// guestStack rewrites a QuickJS stack for the guest: frames of the script
// point at the guest's lines and columns (code.js or code.ts), frames of
// toolq's own runtime are dropped, and at most maxFrames are kept.
func (p *positions) guestStack(stack string) string {
	var b strings.Builder
	kept := 0
	for _, l := range strings.Split(stack, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.Contains(t, "toolq:runtime") {
			continue
		}
		if kept == maxFrames {
			b.WriteString("\n    …")
			break
		}
		t = frameRE.ReplaceAllStringFunc(t, func(m string) string {
			sub := frameRE.FindStringSubmatch(m)
			line, _ := strconv.Atoi(sub[1])
			col, _ := strconv.Atoi(sub[2])
			if gl, gc, _, ok := p.script(line, col); ok {
				return fmt.Sprintf("%s:%d:%d", p.file(), gl, gc)
			}
			return p.file()
		})
		b.WriteString("\n    ")
		b.WriteString(t)
		kept++
	}
	return b.String()
}
