// Package layers holds the test that keeps gpush's packages layered as
// DESIGN.md draws them: cmd -> lua -> modules -> remote -> helper, with
// inventory a leaf that only lua and cmd read. It has no code of its own.
package layers
