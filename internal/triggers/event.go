package triggers

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// An endpoint's request becomes an event in the shape of Lambda's function
// URL payload (version 2.0), and the handler's result becomes the answer.

// HTTPEvent is the event of an endpoint request.
type HTTPEvent struct {
	Version               string            `json:"version"`
	RouteKey              string            `json:"routeKey"`
	RawPath               string            `json:"rawPath"`
	RawQueryString        string            `json:"rawQueryString"`
	Cookies               []string          `json:"cookies,omitempty"`
	Headers               map[string]string `json:"headers"`
	QueryStringParameters map[string]string `json:"queryStringParameters,omitempty"`
	RequestContext        RequestContext    `json:"requestContext"`
	Body                  string            `json:"body,omitempty"`
	IsBase64Encoded       bool              `json:"isBase64Encoded"`
}

// RequestContext describes an endpoint request.
type RequestContext struct {
	Endpoint   string      `json:"endpoint"`
	DomainName string      `json:"domainName"`
	HTTP       HTTPContext `json:"http"`
	RequestID  string      `json:"requestId"`
	Time       string      `json:"time"`
	TimeEpoch  int64       `json:"timeEpoch"`
}

// HTTPContext is the request line and the caller.
type HTTPContext struct {
	Method    string `json:"method"`
	Path      string `json:"path"`
	Protocol  string `json:"protocol"`
	SourceIP  string `json:"sourceIp"`
	UserAgent string `json:"userAgent"`
}

// secretHeaders carry the endpoint's key: the function never sees them.
var secretHeaders = map[string]bool{"authorization": true, "x-thaw-key": true}

// eventOf maps a request and its body to the event. Headers are
// lower-cased and repeated ones joined with commas (cookies apart, as a
// list); a body that is not UTF-8 is base64.
func eventOf(r *http.Request, body []byte, endpoint, requestID string, now time.Time) HTTPEvent {
	ev := HTTPEvent{Version: "2.0", RouteKey: "$default", RawPath: r.URL.EscapedPath(), RawQueryString: r.URL.RawQuery,
		Headers: map[string]string{}}
	for name, vals := range r.Header {
		n := strings.ToLower(name)
		if secretHeaders[n] {
			continue
		}
		if n == "cookie" {
			for _, v := range vals {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						ev.Cookies = append(ev.Cookies, c)
					}
				}
			}
			continue
		}
		ev.Headers[n] = strings.Join(vals, ",")
	}
	if r.Host != "" {
		ev.Headers["host"] = r.Host
	}
	if q, err := url.ParseQuery(r.URL.RawQuery); err == nil && len(q) > 0 {
		ev.QueryStringParameters = map[string]string{}
		for k, v := range q {
			ev.QueryStringParameters[k] = strings.Join(v, ",")
		}
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	ev.RequestContext = RequestContext{Endpoint: endpoint, DomainName: hostOnly(r.Host), RequestID: requestID,
		Time: now.UTC().Format("02/Jan/2006:15:04:05 -0700"), TimeEpoch: now.UnixMilli(),
		HTTP: HTTPContext{Method: r.Method, Path: r.URL.Path, Protocol: r.Proto, SourceIP: ip, UserAgent: r.UserAgent()}}
	return ev
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// httpResult is a handler's result that describes a response.
type httpResult struct {
	StatusCode        *int                `json:"statusCode"`
	Headers           map[string]any      `json:"headers"`
	MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
	Cookies           []string            `json:"cookies"`
	Body              json.RawMessage     `json:"body"`
	IsBase64Encoded   bool                `json:"isBase64Encoded"`
}

// response is what an endpoint answers.
type response struct {
	status int
	header http.Header
	body   []byte
}

// hopHeaders are the connection's, never a function's to set.
var hopHeaders = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"upgrade": true, "te": true, "trailer": true, "content-length": true}

// responseOf maps a result to the answer: an object with statusCode is a
// response (headers, cookies, body, isBase64Encoded); anything else is
// 200 application/json with the result as the body. A response that
// cannot be sent as HTTP is an error.
func responseOf(result json.RawMessage) (*response, error) {
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	plain := &response{status: http.StatusOK, header: http.Header{"Content-Type": {"application/json"}}, body: result}
	trimmed := strings.TrimSpace(string(result))
	if !strings.HasPrefix(trimmed, "{") {
		return plain, nil
	}
	var hr httpResult
	if err := json.Unmarshal(result, &hr); err != nil || hr.StatusCode == nil {
		return plain, nil // an object without statusCode is a JSON body
	}
	if *hr.StatusCode < 200 || *hr.StatusCode > 599 {
		return nil, fmt.Errorf("statusCode %d is not 200 to 599", *hr.StatusCode)
	}
	resp := &response{status: *hr.StatusCode, header: http.Header{}}
	add := func(name, val string) error {
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(val) {
			return fmt.Errorf("header %q is not a valid HTTP header", name)
		}
		if !hopHeaders[strings.ToLower(name)] {
			resp.header.Add(name, val)
		}
		return nil
	}
	for name, v := range hr.Headers {
		var val string
		switch v := v.(type) {
		case string:
			val = v
		case float64:
			val = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			val = strconv.FormatBool(v)
		default:
			return nil, fmt.Errorf("header %q: value is not a string", name)
		}
		if err := add(name, val); err != nil {
			return nil, err
		}
	}
	for name, vals := range hr.MultiValueHeaders {
		for _, v := range vals {
			if err := add(name, v); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range hr.Cookies {
		if err := add("Set-Cookie", c); err != nil {
			return nil, err
		}
	}
	body, err := bodyOf(hr.Body, hr.IsBase64Encoded)
	if err != nil {
		return nil, err
	}
	resp.body = body
	if resp.header.Get("Content-Type") == "" && len(body) > 0 {
		resp.header.Set("Content-Type", "application/json")
	}
	return resp, nil
}

// bodyOf is a response's body: a string as it is (decoded if base64),
// any other JSON value encoded.
func bodyOf(raw json.RawMessage, b64 bool) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		if b64 {
			return nil, fmt.Errorf("isBase64Encoded with a body that is not a string")
		}
		return raw, nil
	}
	if !b64 {
		return []byte(s), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("body is not base64: %v", err)
	}
	return b, nil
}
