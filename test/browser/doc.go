// Package browser tests what the control plane draws in a real browser:
// Debian's headless chromium, driven over the DevTools protocol by chromedp,
// opens the traffic map of the real binary serving manifest files and reads
// the drawn figures back from the DOM, to compare them with explain.
package browser
