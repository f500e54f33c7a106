package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Limits that keep a hostile expression from exhausting the guest.
const (
	maxExpressionLen = 4096
	maxDepth         = 200
)

// Eval evaluates an arithmetic expression: numbers (integers, decimals,
// exponents such as 1.5e3), + - * / % ^, parentheses and unary minus or plus.
// ^ binds tightest and is right-associative; unary minus binds looser than ^,
// so -2^2 is -4. Division or modulo by zero, and results that are not finite,
// are errors.
func Eval(expr string) (float64, error) {
	if strings.TrimSpace(expr) == "" {
		return 0, fmt.Errorf("empty expression")
	}
	if len(expr) > maxExpressionLen {
		return 0, fmt.Errorf("expression is %d bytes long; the limit is %d", len(expr), maxExpressionLen)
	}
	p := &parser{src: expr}
	v, err := p.expr(0)
	if err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos < len(p.src) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.src[p.pos], p.pos+1)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("result is not a finite number")
	}
	return v, nil
}

// Format renders a result the way a person writes it: 4, 0.5, 1e+21.
func Format(v float64) string {
	if v == 0 {
		return "0" // no "-0"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

type parser struct {
	src string
	pos int
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

// expr := term (('+' | '-') term)*
func (p *parser) expr(depth int) (float64, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("expression nested deeper than %d levels", maxDepth)
	}
	left, err := p.term(depth)
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != '+' && op != '-' {
			return left, nil
		}
		p.pos++
		right, err := p.term(depth)
		if err != nil {
			return 0, err
		}
		if op == '+' {
			left += right
		} else {
			left -= right
		}
	}
}

// term := unary (('*' | '/' | '%') unary)*
func (p *parser) term(depth int) (float64, error) {
	left, err := p.unary(depth)
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != '*' && op != '/' && op != '%' {
			return left, nil
		}
		at := p.pos + 1
		p.pos++
		right, err := p.unary(depth)
		if err != nil {
			return 0, err
		}
		switch op {
		case '*':
			left *= right
		case '/':
			if right == 0 {
				return 0, fmt.Errorf("division by zero at position %d", at)
			}
			left /= right
		case '%':
			if right == 0 {
				return 0, fmt.Errorf("modulo by zero at position %d", at)
			}
			left = math.Mod(left, right)
		}
	}
}

// unary := ('-' | '+') unary | power
func (p *parser) unary(depth int) (float64, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("expression nested deeper than %d levels", maxDepth)
	}
	switch p.peek() {
	case '-':
		p.pos++
		v, err := p.unary(depth + 1)
		return -v, err
	case '+':
		p.pos++
		return p.unary(depth + 1)
	}
	return p.power(depth)
}

// power := primary ('^' unary)?   (right-associative)
func (p *parser) power(depth int) (float64, error) {
	base, err := p.primary(depth)
	if err != nil {
		return 0, err
	}
	if p.peek() != '^' {
		return base, nil
	}
	p.pos++
	exp, err := p.unary(depth + 1)
	if err != nil {
		return 0, err
	}
	return math.Pow(base, exp), nil
}

// primary := number | '(' expr ')'
func (p *parser) primary(depth int) (float64, error) {
	c := p.peek()
	switch {
	case c == 0:
		return 0, fmt.Errorf("unexpected end of expression")
	case c == '(':
		open := p.pos + 1
		p.pos++
		v, err := p.expr(depth + 1)
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ')' for the '(' at position %d", open)
		}
		p.pos++
		return v, nil
	case c == '.' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return 0, fmt.Errorf("unexpected %q at position %d", c, p.pos+1)
	}
}

func (p *parser) number() (float64, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	n := digits()
	if p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		n += digits()
	}
	if n == 0 {
		return 0, fmt.Errorf("malformed number at position %d", start+1)
	}
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		save := p.pos
		p.pos++
		if p.pos < len(p.src) && (p.src[p.pos] == '+' || p.src[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			p.pos = save // not an exponent: leave the 'e' for the caller to refuse
		}
	}
	v, err := strconv.ParseFloat(p.src[start:p.pos], 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("number %q at position %d is out of range", p.src[start:p.pos], start+1)
	}
	if err != nil {
		return 0, fmt.Errorf("malformed number %q at position %d", p.src[start:p.pos], start+1)
	}
	return v, nil
}
