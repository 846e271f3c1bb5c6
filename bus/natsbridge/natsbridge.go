// Package natsbridge carries a chat's events between baton instances over
// NATS, so that a client connected to any instance sees every chat.
//
// Each instance runs one Bridge on its bus. The bridge observes the events
// its own instance records (chat.*, after the store holds them) and
// streams (stream.*), and publishes each on the subject
// baton.events.<chat_id> with the instance as the message's origin; it
// subscribes to the chats watched here (Config.PerChat and Watch: the
// chats this instance's clients follow) or to baton.events.>, and
// broadcasts what other instances published to its own bus's observers
// (the WebSocket and SSE hub), tagged with their origin so that nothing is
// sent back out and nothing is counted twice (bus.Remote).
//
// Core NATS delivers at most once. That is enough because the store is the
// truth and chat events carry sequences: a hub that sees a sequence skip
// fills the gap from the store, and when the connection to NATS comes back
// the bridge calls OnReconnect so that every stream replays from its last
// sequence. Transient stream.* deltas lost in an outage are simply lost, as
// on a dropped socket; the recorded text follows. The same holds when the
// bridge's own bus subscription falls behind (a burst larger than its
// buffer while NATS is slow) and the bus drops it: the bridge subscribes
// again and publishes on <namespace>.control.resync, and every other
// instance's bridge then calls OnReconnect, since some of this instance's
// events never reached NATS.
//
// With Config.Inputs, the bridge also routes inputs to the chat's owner
// through a JetStream work queue (inputs.go). Without it, inputs are handled
// by the instance that receives them: with leases
// (engine.Config.InstanceID) any instance may run any chat, one at a time,
// and the chat's state handles an input once per event id.
package natsbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// DefaultNamespace is the first token of every subject the bridge uses:
// chat events travel on <namespace>.events.<chat id>, inputs on
// <namespace>.inputs.<instance>.<chat id>.
const DefaultNamespace = "baton"

// originKey marks, in an event's metadata, the instance that produced it;
// originHeader carries the same on the NATS message.
const (
	originKey    = bus.OriginKey
	originHeader = "Baton-Origin"
)

// Config configures a Bridge.
type Config struct {
	URL      string   // the NATS server, e.g. nats://127.0.0.1:4222
	Bus      *bus.Bus // this instance's bus
	Instance string   // this instance's id; required, one NATS subject token
	Logger   *slog.Logger
	// OnReconnect is called after the connection to NATS comes back, so
	// that every stream can replay what it may have missed from the store.
	OnReconnect func()
	// Lag, if set, is told how long each event from another instance took
	// from its creation there to its arrival here (clocks of both matter).
	Lag func(time.Duration)
	// Namespace separates deployments sharing one NATS server (default
	// DefaultNamespace); every instance of a deployment must use the same.
	Namespace string
	// Inputs, if set, routes inputs to the chat's owner through JetStream.
	Inputs *InputsConfig
	// PerChat makes the bridge receive only the chats someone watches here
	// (Watch: the hub, for the chats its clients follow) instead of every
	// chat of every instance.
	PerChat bool
}

// Bridge forwards events between its bus and NATS. Start it with Start and
// stop it with Close.
type Bridge struct {
	cfg    Config
	log    *slog.Logger
	ns     string
	nc     *nats.Conn
	inputs *inputs // nil without Config.Inputs
	sub    *nats.Subscription
	resync *nats.Subscription // other instances' resync requests
	wg     sync.WaitGroup

	localMu sync.Mutex
	local   *bus.Subscription // this instance's events; replaced by forward when dropped
	closing bool              // set by Close: forward subscribes no more

	stopInputs sync.Once
	stopOnce   sync.Once

	watchMu sync.Mutex
	watched map[string]*watch    // with PerChat: the chats watched here
	unsubs  []*nats.Subscription // released, to unsubscribe (unsubscriber)
	unsubCh chan struct{}        // signals the unsubscriber
	stopped chan struct{}        // closed by Close: the unsubscriber ends

	mu       sync.Mutex
	sent     int64
	received int64
}

// Start connects to NATS and starts forwarding.
func Start(cfg Config) (*Bridge, error) {
	if cfg.Bus == nil || cfg.Instance == "" {
		return nil, errors.New("natsbridge: Bus and Instance are required")
	}
	if nameToken(cfg.Instance) != cfg.Instance {
		// Subjects and consumer names carry it: two ids must not collide.
		return nil, fmt.Errorf("natsbridge: instance id %q: must not contain '.', '*', '>', '/', '\\' or spaces", cfg.Instance)
	}
	br := &Bridge{cfg: cfg, log: cfg.Logger, ns: cfg.Namespace}
	if br.log == nil {
		br.log = slog.Default()
	}
	if br.ns == "" {
		br.ns = DefaultNamespace
	}
	if strings.ContainsAny(br.ns, ".*> \t\r\n") {
		return nil, fmt.Errorf("natsbridge: namespace %q: must be one subject token", br.ns)
	}
	nc, err := nats.Connect(cfg.URL,
		nats.Name("baton "+cfg.Instance),
		nats.MaxReconnects(-1),
		nats.ReconnectHandler(func(*nats.Conn) {
			br.log.Info("natsbridge: reconnected; streams replay from the store", "instance", cfg.Instance)
			if cfg.OnReconnect != nil {
				cfg.OnReconnect()
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			br.log.Warn("natsbridge: disconnected from NATS", "instance", cfg.Instance, "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("natsbridge: connect %s: %w", cfg.URL, err)
	}
	br.nc = nc
	if cfg.PerChat {
		br.watched = map[string]*watch{}
		br.unsubCh, br.stopped = make(chan struct{}, 1), make(chan struct{})
		br.wg.Add(1)
		go br.unsubscriber() // owned by the bridge: ended by Close
	} else if br.sub, err = nc.Subscribe(br.ns+".events.>", br.receive); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: subscribe: %w", err)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: %w", err)
	}
	if br.resync, err = nc.Subscribe(br.ns+".control.resync", br.onResync); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: subscribe: %w", err)
	}
	if br.local, err = cfg.Bus.Subscribe(forwarded, bus.Buffer(forwardBuffer)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: %w", err)
	}
	if cfg.Inputs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := br.startInputs(ctx, *cfg.Inputs)
		cancel()
		if err != nil {
			br.local.Close()
			nc.Close()
			return nil, err
		}
	}
	br.wg.Add(1)
	go br.forward()
	return br, nil
}

// The events the bridge forwards, and how many may wait for NATS.
var forwarded = []string{"chat.*", "stream.*"}

const forwardBuffer = 1 << 16

// forward publishes this instance's own events to NATS. When the bus drops
// its subscription for falling behind, it subscribes again and asks the
// other instances to resync: the events dropped meanwhile are in the store
// (recorded ones) or gone (deltas), and remote streams replay.
func (br *Bridge) forward() {
	defer br.wg.Done()
	for {
		br.localMu.Lock()
		sub := br.local
		br.localMu.Unlock()
		br.forwardFrom(sub)
		err := sub.Err()
		if err == nil || errors.Is(err, baton.ErrClosed) {
			return // closed: the bridge or the bus stops
		}
		br.log.Warn("natsbridge: fell behind; some events did not reach other instances, which replay from the store", "err", err)
		br.localMu.Lock()
		if br.closing {
			br.localMu.Unlock()
			return
		}
		next, serr := br.cfg.Bus.Subscribe(forwarded, bus.Buffer(forwardBuffer))
		if serr != nil {
			br.localMu.Unlock()
			br.log.Warn("natsbridge: subscribe to the bus again", "err", serr)
			return // the bus is closed
		}
		br.local = next
		br.localMu.Unlock()
		msg := &nats.Msg{Subject: br.ns + ".control.resync", Header: nats.Header{}}
		msg.Header.Set(originHeader, br.cfg.Instance)
		if err := br.nc.PublishMsg(msg); err != nil {
			br.log.Warn("natsbridge: ask other instances to resync", "err", err)
		}
	}
}

// onResync handles another instance's resync request: its streams missed
// events, so every stream here replays from its last sequence.
func (br *Bridge) onResync(m *nats.Msg) {
	if m.Header.Get(originHeader) == br.cfg.Instance {
		return
	}
	br.log.Info("natsbridge: another instance fell behind; streams replay from the store", "from", m.Header.Get(originHeader))
	if br.cfg.OnReconnect != nil {
		br.cfg.OnReconnect()
	}
}

// forwardFrom publishes the events of sub until it ends.
func (br *Bridge) forwardFrom(sub *bus.Subscription) {
	for ev := range sub.C() {
		if _, remote := ev.Metadata.Extra[originKey]; remote {
			continue // another instance's event, broadcast here by receive
		}
		data, err := json.Marshal(ev)
		if err != nil {
			br.log.Warn("natsbridge: encode event", "event_id", ev.ID, "err", err)
			continue
		}
		msg := &nats.Msg{Subject: br.ns + ".events." + subjectToken(ev.ChatID()), Data: data, Header: nats.Header{}}
		msg.Header.Set(originHeader, br.cfg.Instance)
		if err := br.nc.PublishMsg(msg); err != nil {
			// NATS is down: the event is in the store; remote streams fill
			// the gap when they replay after the reconnect.
			br.log.Debug("natsbridge: publish", "event_id", ev.ID, "err", err)
			continue
		}
		br.mu.Lock()
		br.sent++
		br.mu.Unlock()
	}
}

// receive broadcasts another instance's event to this instance's observers.
func (br *Bridge) receive(m *nats.Msg) {
	origin := m.Header.Get(originHeader)
	if origin == br.cfg.Instance {
		return
	}
	ev, err := baton.DecodeEvent(m.Data)
	if err != nil {
		br.log.Warn("natsbridge: drop a malformed event", "subject", m.Subject, "err", err)
		return
	}
	if br.cfg.Lag != nil && ev.Timestamp > 0 {
		br.cfg.Lag(time.Since(time.UnixMilli(ev.Timestamp)))
	}
	if ev.Metadata.Extra == nil {
		ev.Metadata.Extra = map[string]json.RawMessage{}
	}
	raw, _ := json.Marshal(origin)
	ev.Metadata.Extra[originKey] = raw
	if err := br.cfg.Bus.Broadcast(ev); err != nil && !errors.Is(err, baton.ErrClosed) {
		br.log.Debug("natsbridge: broadcast", "err", err)
	}
	br.mu.Lock()
	br.received++
	br.mu.Unlock()
}

// watch is one chat's subscription, shared by everyone watching it here.
type watch struct {
	sub  *nats.Subscription
	refs int
}

// Watch makes the bridge receive chatID's events from other instances
// until the returned release is called; watches of one chat share one
// NATS subscription, made on the first and dropped with the last. It
// returns once NATS has the subscription, so that a stream that watches,
// then replays from the store, then goes live misses nothing; if NATS is
// unreachable it returns at once and the stream relies on the replay when
// NATS comes back (OnReconnect). Without Config.PerChat every chat is
// received anyway and Watch does nothing.
func (br *Bridge) Watch(chatID string) (release func()) {
	if br.watched == nil || chatID == "" {
		return func() {}
	}
	br.watchMu.Lock()
	w := br.watched[chatID]
	if w == nil {
		w = &watch{}
		sub, err := br.nc.Subscribe(br.ns+".events."+subjectToken(chatID), br.receive)
		if err != nil {
			br.log.Warn("natsbridge: watch a chat", "chat_id", chatID, "err", err)
		}
		w.sub = sub
		br.watched[chatID] = w
	}
	w.refs++
	br.watchMu.Unlock()
	if br.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = br.nc.FlushWithContext(ctx) // NATS has the subscription before the stream replays
		cancel()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			br.watchMu.Lock()
			defer br.watchMu.Unlock()
			if w.refs--; w.refs == 0 {
				if w.sub != nil {
					// Unsubscribing may wait on a stalled NATS link: the
					// unsubscriber does it, so release never blocks its
					// caller (the hub, under its lock).
					br.unsubs = append(br.unsubs, w.sub)
					select {
					case br.unsubCh <- struct{}{}:
					default:
					}
				}
				delete(br.watched, chatID)
			}
		})
	}
}

// unsubscriber drops the subscriptions of released watches until Close.
func (br *Bridge) unsubscriber() {
	defer br.wg.Done()
	for {
		select {
		case <-br.unsubCh:
		case <-br.stopped:
			return
		}
		br.watchMu.Lock()
		subs := br.unsubs
		br.unsubs = nil
		br.watchMu.Unlock()
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
}

// Watched returns how many chats the bridge receives because they are
// watched here (with Config.PerChat).
func (br *Bridge) Watched() int {
	br.watchMu.Lock()
	defer br.watchMu.Unlock()
	return len(br.watched)
}

// Stats returns how many events the bridge sent to and received from NATS.
func (br *Bridge) Stats() (sent, received int64) {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.sent, br.received
}

// StopInputs stops routing inputs and taking them from JetStream; inputs
// already handed to the bus are still acknowledged as they are handled.
// Call it before closing the bus, and Close after: a graceful stop lets
// the bus finish what it accepted while the connection can still
// acknowledge it. It is idempotent.
func (br *Bridge) StopInputs() {
	br.stopInputs.Do(func() {
		if br.inputs != nil {
			br.inputs.stop()
		}
	})
}

// Close stops forwarding and routing and closes the connection. Inputs
// delivered but not yet handled are delivered again later (to this
// instance's successor, or drained by another).
func (br *Bridge) Close(ctx context.Context) error {
	br.StopInputs()
	if br.inputs != nil {
		br.cfg.Bus.SetHandledHook(nil)
		br.inputs.nakPending() // taken and not handled: delivered again at once
	}
	br.localMu.Lock()
	br.closing = true
	br.local.Close()
	br.localMu.Unlock()
	if br.stopped != nil {
		br.stopOnce.Do(func() { close(br.stopped) })
	}
	done := make(chan struct{})
	go func() { br.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if br.sub != nil {
		_ = br.sub.Unsubscribe()
	}
	_ = br.resync.Unsubscribe()
	br.nc.Close()
	return nil
}

// subjectToken makes a chat id safe as one NATS subject token.
func subjectToken(chatID string) string {
	if chatID == "" {
		return "_"
	}
	b := []byte(chatID)
	for i, c := range b {
		if c == '.' || c == '*' || c == '>' || c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}
