import FlowFetch
import Testing

@Suite("Client sessions and profiles")
struct SessionTests {
    /// `printf %s user-42 | sha256sum` and `printf %s user-7 | sha256sum`, first 16 hex characters.
    static let user42 = "6d894aa3ee802549"
    static let user7 = "092081140b677b45"

    @Test("the profile tag is the first 16 hex characters of the id's SHA-256, or the id itself when plain ids are on")
    func profileTag() {
        #expect(ProfileTag.hashed("user-42") == Self.user42)
        #expect(ProfileTag.tag(for: "user-42", plain: false) == Self.user42)
        #expect(ProfileTag.tag(for: "user-42", plain: true) == "user-42")
        #expect(ProfileTag.tag(for: "", plain: false) == nil)
        let long = String(repeating: "u", count: ProfileTag.maxPlainBytes + 1)
        #expect(ProfileTag.tag(for: long, plain: true) == ProfileTag.hashed(long))
    }

    @Test("two clients get different sessions; every event of one client, attribution included, carries its session and hashed profile")
    func oneSessionPerClient() async throws {
        let eventsA = Events(), eventsB = Events()
        let a = FlowClient(profile: Profile(id: "user-42"), backend: FixedBackend(), events: eventsA, clock: NoDeadlineClock())
        let b = FlowClient(profile: Profile(id: "user-42"), backend: FixedBackend(), events: eventsB, clock: NoDeadlineClock())
        #expect(a.session != b.session)
        _ = try await a.getFlow(placementId: "main", loadTimeout: 30)
        a.attributionApplied(source: "appleAds")
        _ = try await b.getFlow(placementId: "main", loadTimeout: 30)
        a.identify(profileId: "user-7")

        let listA = eventsA.list.withLock { $0 }, listB = eventsB.list.withLock { $0 }
        #expect(listA.contains { $0.name == .fetchEnd })
        #expect(listA.contains { $0.name == .attributionApplied })
        #expect(listA.allSatisfy { $0.session == a.session })
        #expect(!listB.isEmpty)
        #expect(listB.allSatisfy { $0.session == b.session })
        #expect(listB.allSatisfy { $0.profile == Self.user42 })
        let changed = try #require(listA.firstIndex { $0.name == .profileChanged })
        #expect(listA[..<changed].allSatisfy { $0.profile == Self.user42 })
        #expect(listA[changed...].allSatisfy { $0.profile == Self.user7 })
        // profile.changed names the ids the same way: hashed, never the plain ids.
        #expect(listA[changed].attrs["from"] == .string(Self.user42) && listA[changed].attrs["to"] == .string(Self.user7))
    }

    @Test("with plainProfileIDs the events carry the profile id as it is")
    func plainProfileIDs() async throws {
        let events = Events()
        let client = FlowClient(profile: Profile(id: "user-42"), backend: FixedBackend(),
                                configuration: .init(plainProfileIDs: true), events: events, clock: NoDeadlineClock())
        _ = try await client.getFlow(placementId: "main", loadTimeout: 30)
        let list = events.list.withLock { $0 }
        #expect(!list.isEmpty)
        #expect(list.allSatisfy { $0.profile == "user-42" && $0.session == client.session })
        client.identify(profileId: "user-7")
        let changed = try #require(events.list.withLock { $0 }.first { $0.name == .profileChanged })
        #expect(changed.attrs["from"] == .string("user-42") && changed.attrs["to"] == .string("user-7"))
    }

    @Test("session ids are 16 lowercase hex characters, never zero; a seeded one is the same for the same seed")
    func sessionIDs() {
        let id = SessionID.random()
        #expect(id.raw != 0)
        #expect(SessionID(hex: id.hex) == id)
        #expect(id.hex.utf8.count == 16 && id.hex == id.hex.lowercased())
        #expect(SessionID(hex: "0000000000000000") == nil)
        #expect(SessionID(seed: 7) == SessionID(seed: 7))
        #expect(SessionID(seed: 7) != SessionID(seed: 8))
        #expect(SessionID(seed: 7).raw != 0)
    }
}
