// A sink's factory reads its options with FlowJSON's types (`JSONInputError`, `JSONValue`), and
// FlowJSON is not a product of its own: `import FlowEvents` alone gives a sink author all of them.
@_exported import FlowJSON
