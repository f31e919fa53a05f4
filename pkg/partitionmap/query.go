package partitionmap

import "strings"

// scanQuery reads the bbox and bbox-crs parameters from a request path ("/p?a=b&c").
// The rules are the generated Lua's, kept deliberately small so both sides agree byte
// for byte: the query starts after the first '?'; parameters are separated by '&' and
// empty ones are skipped; a parameter is split at its first '=' (none: the value is
// empty); keys and values are decoded with '+' as a blank and %XX as a byte, and a '%'
// not followed by two hex digits stays as it is.
func scanQuery(path string) queryBBox {
	var q queryBBox
	_, query, ok := strings.Cut(path, "?")
	if !ok {
		return q
	}
	for query != "" {
		var piece string
		piece, query, _ = strings.Cut(query, "&")
		if piece == "" {
			continue
		}
		k, v, _ := strings.Cut(piece, "=")
		switch unescape(k) {
		case QueryBBox:
			q.bbox = append(q.bbox, unescape(v))
		case QueryCRS:
			q.crs = append(q.crs, unescape(v))
		}
	}
	return q
}

func unescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
