extension Array {
    /// Empties the array and keeps its storage, removing from the end. For the few elements of the
    /// engine's and the simulator's scratch lists this is cheaper than `removeAll(keepingCapacity: true)`,
    /// which goes through the generic `replaceSubrange`. Visible inside the package only.
    @inlinable
    package mutating func clear() {
        while !isEmpty { removeLast() }
    }
}
