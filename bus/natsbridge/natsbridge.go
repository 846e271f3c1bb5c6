// Package natsbridge carries a chat's events between baton instances over
// NATS, so that a client connected to any instance sees every chat.
//
// Each instance runs one Bridge on its bus. The bridge observes the events
// its own instance records (chat.*, after the store holds them) and
// streams (stream.*), and publishes each on the subject
// baton.events.<chat_id> with the instance as the message's origin; it
// subscribes to baton.events.> and broadcasts what other instances published
// to its own bus's observers (the WebSocket and SSE hub, metrics), tagged
// with their origin so that nothing is sent back out.
//
// Core NATS delivers at most once. That is enough because the store is the
// truth and chat events carry sequences: a hub that sees a sequence skip
// fills the gap from the store, and when the connection to NATS comes back
// the bridge calls OnReconnect so that every stream replays from its last
// sequence. Transient stream.* deltas lost in an outage are simply lost, as
// on a dropped socket; the recorded text follows.
//
// Inputs need no bridge: with leases (engine.Config.InstanceID) any instance
// may run any chat, one at a time, and inputs are handled once per event id.
package natsbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// SubjectPrefix is where chat events travel: SubjectPrefix + chat id.
const SubjectPrefix = "baton.events."

// originKey marks, in an event's metadata, the instance that produced it;
// originHeader carries the same on the NATS message.
const (
	originKey    = "origin"
	originHeader = "Baton-Origin"
)

// Config configures a Bridge.
type Config struct {
	URL      string   // the NATS server, e.g. nats://127.0.0.1:4222
	Bus      *bus.Bus // this instance's bus
	Instance string   // this instance's id; required
	Logger   *slog.Logger
	// OnReconnect is called after the connection to NATS comes back, so
	// that every stream can replay what it may have missed from the store.
	OnReconnect func()
	// Lag, if set, is told how long each event from another instance took
	// from its creation there to its arrival here (clocks of both matter).
	Lag func(time.Duration)
}

// Bridge forwards events between its bus and NATS. Start it with Start and
// stop it with Close.
type Bridge struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	local *bus.Subscription
	sub   *nats.Subscription
	wg    sync.WaitGroup

	mu       sync.Mutex
	sent     int64
	received int64
}

// Start connects to NATS and starts forwarding.
func Start(cfg Config) (*Bridge, error) {
	if cfg.Bus == nil || cfg.Instance == "" {
		return nil, errors.New("natsbridge: Bus and Instance are required")
	}
	br := &Bridge{cfg: cfg, log: cfg.Logger}
	if br.log == nil {
		br.log = slog.Default()
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
	if br.sub, err = nc.Subscribe(SubjectPrefix+">", br.receive); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: subscribe: %w", err)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: %w", err)
	}
	if br.local, err = cfg.Bus.Subscribe([]string{"chat.*", "stream.*"}, bus.Buffer(1<<16)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsbridge: %w", err)
	}
	br.wg.Add(1)
	go br.forward()
	return br, nil
}

// forward publishes this instance's own events to NATS.
func (br *Bridge) forward() {
	defer br.wg.Done()
	for ev := range br.local.C() {
		if _, remote := ev.Metadata.Extra[originKey]; remote {
			continue // another instance's event, broadcast here by receive
		}
		data, err := json.Marshal(ev)
		if err != nil {
			br.log.Warn("natsbridge: encode event", "event_id", ev.ID, "err", err)
			continue
		}
		msg := &nats.Msg{Subject: SubjectPrefix + subjectToken(ev.ChatID()), Data: data, Header: nats.Header{}}
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
	if err := br.local.Err(); err != nil && !errors.Is(err, baton.ErrClosed) {
		br.log.Warn("natsbridge: local subscription ended", "err", err)
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

// Stats returns how many events the bridge sent to and received from NATS.
func (br *Bridge) Stats() (sent, received int64) {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.sent, br.received
}

// Close stops forwarding and closes the connection. Call it before closing
// the bus.
func (br *Bridge) Close(ctx context.Context) error {
	br.local.Close()
	done := make(chan struct{})
	go func() { br.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	_ = br.sub.Unsubscribe()
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
