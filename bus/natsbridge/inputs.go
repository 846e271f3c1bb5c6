package natsbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/batonhq/baton"
)

// Input routing. With Config.Inputs set, the bridge is the bus's Router: an
// input published on any instance (a person's message, a UI response, an
// external event, a run start or resume) is not handled where it arrived
// but stored in a JetStream work-queue stream on the subject
// <namespace>.inputs.<owner>.<chat>, where owner is the instance holding the
// chat's live lease, or the receiving instance when no one does (it will
// take the lease). The message id is the event id, so JetStream drops a
// retried publish of the same input within the stream's duplicate window,
// whichever instance it was retried through.
//
// Each instance consumes its own subjects through a durable consumer named
// after it, hands each input to its bus in stream order (so a chat's inputs
// keep their order on the chat's lane) and acknowledges it only after the
// bus's handler returned: an owner that dies with inputs accepted but not
// handled leaves them in the stream. Its consumer, idle, is removed by the
// server after InactiveAfter; every instance looks for input subjects whose
// instance has no consumer and drains them, handing them to its own bus,
// where the engine takes the chat's lease (expired by then) and the chat's
// state drops any input already recorded.
//
// When NATS cannot be reached, an input is handled by the receiving
// instance, as without routing (the lease still gives the chat one owner).
// An input whose handling fails is delivered again (at most 20 times); one
// taken and not handled at shutdown is given back at once.

// LeaseReader reads a chat's lease; a baton.LeaseStore is one.
type LeaseReader interface {
	GetLease(ctx context.Context, chatID string) (baton.Lease, error)
}

// InputsConfig turns on input routing through JetStream.
type InputsConfig struct {
	// Leases tells who owns a chat now. Required.
	Leases LeaseReader
	// IsInput says which published events are inputs to route. Required;
	// events it refuses, and events without a chat, are handled where they
	// are published.
	IsInput func(baton.Event) bool
	// Duplicates is the stream's de-duplication window (default 2 minutes).
	Duplicates time.Duration
	// AckWait is how long JetStream waits for news of an input it
	// delivered before delivering it again (default 30 seconds): the
	// instance handling it says it is in progress every AckWait/3, so this
	// bounds how soon the inputs of an instance that crashed and restarted
	// under its id are delivered again, not how long a run may take.
	AckWait time.Duration
	// InactiveAfter is how long a consumer lives without its instance
	// pulling, and so how soon after an instance dies its undelivered
	// inputs are drained by another (default 30 seconds, at least 3).
	InactiveAfter time.Duration
}

// Input routing defaults.
const (
	DefaultInputDuplicates = 2 * time.Minute
	DefaultInputAckWait    = 30 * time.Second
	DefaultInactiveAfter   = 30 * time.Second
	maxAckPending          = 20000 // inputs in handling at once per instance
	// An input whose handling failed is delivered again after
	// redeliverDelay, up to maxDeliver deliveries in all.
	redeliverDelay = 2 * time.Second
	maxDeliver     = 20
	// routeTimeout bounds the wait for JetStream to store an input; past it
	// the input is handled where it arrived.
	routeTimeout = 5 * time.Second
)

// inputs is the routing half of a Bridge.
type inputs struct {
	br      *Bridge
	cfg     InputsConfig
	js      jetstream.JetStream
	stream  jetstream.Stream
	prefix  string // <namespace>.inputs.
	consume jetstream.ConsumeContext
	ctx     context.Context
	cancel  context.CancelFunc
	expiry  time.Duration // pull request expiry

	mu      sync.Mutex
	pending map[string][]jetstream.Msg // by inputKey: delivered, not yet handled
	// failed holds the ids of inputs whose handling failed here and that
	// were given back for a retry: their next delivery must be handled
	// although the bus remembers the id. JetStream's delivery count cannot
	// tell, as it starts again on a consumer made anew (after NATS removed
	// an idle one) or on a drain. Bounded by maxFailed.
	failed map[string]struct{}
	stats  InputStats
}

// inputKey names an input as JetStream's message id does: its chat and its
// id. Ids may come from clients, and two chats' inputs with the same id are
// two inputs.
func inputKey(ev baton.Event) string { return ev.ChatID() + "/" + ev.ID }

// maxFailed bounds inputs.failed; past it the set starts over (an input
// then delivered again is de-duplicated by its chat's state, which knows
// the inputs it recorded, rather than by the bus).
const maxFailed = 10_000

// InputStats counts what input routing did.
type InputStats struct {
	Routed    int64 // inputs this instance published to the stream
	Duplicate int64 // of those, dropped by JetStream as retries
	Local     int64 // inputs handled here because JetStream failed
	Delivered int64 // inputs this instance took from the stream
	Drained   int64 // of those, from a dead instance's subjects
}

func (br *Bridge) startInputs(ctx context.Context, cfg InputsConfig) error {
	if cfg.Leases == nil || cfg.IsInput == nil {
		return errors.New("natsbridge: Inputs needs Leases and IsInput")
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = DefaultInputDuplicates
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultInputAckWait
	}
	if cfg.InactiveAfter <= 0 {
		cfg.InactiveAfter = DefaultInactiveAfter
	}
	cfg.InactiveAfter = max(cfg.InactiveAfter, 3*time.Second)
	in := &inputs{br: br, cfg: cfg, prefix: br.ns + ".inputs.", pending: map[string][]jetstream.Msg{}, failed: map[string]struct{}{}}
	// Pulls must come often enough that a live instance's consumer is
	// never taken for idle; the client wants them at least a second long.
	in.expiry = max(2*time.Second, min(30*time.Second, cfg.InactiveAfter/3))
	var err error
	if in.js, err = jetstream.New(br.nc); err != nil {
		return fmt.Errorf("natsbridge: jetstream: %w", err)
	}
	in.stream, err = in.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        InputStream(br.ns),
		Description: "baton inputs routed to the instance that owns each chat",
		Subjects:    []string{in.prefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  cfg.Duplicates,
		MaxAge:      24 * time.Hour,
	})
	if err != nil {
		return fmt.Errorf("natsbridge: inputs stream: %w", err)
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	if err := in.startConsume(ctx); err != nil {
		in.cancel()
		return err
	}
	br.inputs = in
	br.cfg.Bus.SetHandledHook(in.handled)
	br.cfg.Bus.SetRouter(in)
	br.wg.Add(1)
	go in.drainLoop() // owned by the bridge: stopped by Close
	return nil
}

// startConsume creates (or finds) this instance's consumer and consumes it.
func (in *inputs) startConsume(ctx context.Context) error {
	cons, err := in.stream.CreateOrUpdateConsumer(ctx, in.consumerConfig(in.br.cfg.Instance))
	if err != nil {
		return fmt.Errorf("natsbridge: inputs consumer: %w", err)
	}
	cc, err := cons.Consume(in.deliver(false),
		jetstream.PullExpiry(in.expiry), jetstream.PullHeartbeat(max(500*time.Millisecond, in.expiry/4)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			in.br.log.Debug("natsbridge: inputs consumer", "instance", in.br.cfg.Instance, "err", err)
		}))
	if err != nil {
		return fmt.Errorf("natsbridge: consume inputs: %w", err)
	}
	in.mu.Lock()
	in.consume = cc
	in.mu.Unlock()
	return nil
}

// ensureConsumer consumes this instance's inputs again if NATS removed its
// consumer (it looked idle: a long partition, or a consumer blocked on a
// full lane), instead of leaving them to other instances' drains.
func (in *inputs) ensureConsumer(ctx context.Context) error {
	_, err := in.stream.Consumer(ctx, in.consumerConfig(in.br.cfg.Instance).Durable)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	in.br.log.Warn("natsbridge: this instance's inputs consumer was removed; consuming again", "instance", in.br.cfg.Instance)
	in.mu.Lock()
	old := in.consume
	in.mu.Unlock()
	old.Stop()
	return in.startConsume(ctx)
}

// InputStream names the JetStream stream of a namespace's inputs.
func InputStream(namespace string) string {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return strings.ToUpper(nameToken(namespace)) + "_INPUTS"
}

// consumerConfig is the durable work-queue consumer of instance's inputs.
func (in *inputs) consumerConfig(instance string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           "inputs-" + nameToken(instance),
		Description:       "baton inputs of instance " + instance,
		FilterSubject:     in.prefix + subjectToken(instance) + ".>",
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           in.cfg.AckWait,
		MaxAckPending:     maxAckPending,
		MaxDeliver:        maxDeliver,
		InactiveThreshold: in.cfg.InactiveAfter,
	}
}

// Route publishes an input to the stream, on its owner's subject; see
// bus.Router. It takes only inputs with a chat. When NATS is unreachable or
// the stream is gone it leaves the input to this instance's bus; when
// JetStream does not answer in time (it may have stored the input) it
// fails the publish with EUNAVAILABLE.
func (in *inputs) Route(ctx context.Context, ev baton.Event) (bool, error) {
	chat := ev.ChatID()
	if chat == "" || !in.cfg.IsInput(ev) {
		return false, nil
	}
	if !in.br.nc.IsConnected() {
		return in.local(chat, ev, nats.ErrConnectionClosed), nil
	}
	owner := in.br.cfg.Instance
	if l, err := in.cfg.Leases.GetLease(ctx, chat); err != nil {
		in.br.log.Warn("natsbridge: read the chat's lease; routing the input here", "chat_id", chat, "err", err)
	} else if l.Owner != "" && time.Now().Before(l.Expires) {
		owner = l.Owner
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("encode input: %w", err)
	}
	msg := nats.NewMsg(in.prefix + subjectToken(owner) + "." + subjectToken(chat))
	msg.Data = data
	// Per chat, as the bus de-duplicates: ids may come from clients, and
	// one tenant's id must not make JetStream drop another's input.
	msg.Header.Set(jetstream.MsgIDHeader, inputKey(ev))
	msg.Header.Set(originHeader, in.br.cfg.Instance)
	pctx, cancel := context.WithTimeout(ctx, routeTimeout)
	ack, err := in.js.PublishMsg(pctx, msg)
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || !in.br.nc.IsConnected():
		// Nothing was stored: the stream or the connection is gone.
		return in.local(chat, ev, err), nil
	default:
		// A timeout may hide an input JetStream stored: handling it here
		// too could handle it twice. The caller gets the error and may
		// retry with the same event id, which JetStream de-duplicates.
		return false, baton.Errorf(baton.EUNAVAILABLE, "route input %s: %v", ev.ID, err)
	}
	in.mu.Lock()
	in.stats.Routed++
	if ack.Duplicate {
		in.stats.Duplicate++
	}
	in.mu.Unlock()
	return true, nil
}

// local counts and logs an input left to this instance because JetStream
// could not take it; it returns false (not routed).
func (in *inputs) local(chat string, ev baton.Event, err error) bool {
	in.br.log.Warn("natsbridge: JetStream did not take an input; handling it here", "chat_id", chat, "event_id", ev.ID, "err", err)
	in.mu.Lock()
	in.stats.Local++
	in.mu.Unlock()
	return false
}

// deliver hands an input from the stream to this instance's bus. It is
// acknowledged once its handler returned without error (handled); a copy
// delivered again while the first is still being handled is acknowledged
// with it. A redelivery — an earlier handling failed, or its instance
// died — is handled even though the bus may remember its id.
func (in *inputs) deliver(drained bool) jetstream.MessageHandler {
	return func(m jetstream.Msg) {
		ev, err := baton.DecodeEvent(m.Data())
		if err != nil {
			in.br.log.Warn("natsbridge: drop a malformed input", "subject", m.Subject(), "err", err)
			_ = m.Term()
			return
		}
		key := inputKey(ev)
		in.mu.Lock()
		in.stats.Delivered++
		if drained {
			in.stats.Drained++
		}
		if len(in.pending[key]) > 0 {
			in.pending[key] = append(in.pending[key], m)
			in.mu.Unlock()
			return // being handled here: settled with the first
		}
		in.pending[key] = []jetstream.Msg{m}
		_, retry := in.failed[key]
		in.mu.Unlock()
		accepted := true
		if md, mdErr := m.Metadata(); retry || mdErr == nil && md.NumDelivered > 1 {
			err = in.br.cfg.Bus.PublishAgain(in.ctx, ev)
		} else {
			accepted, err = in.br.cfg.Bus.PublishLocal(in.ctx, ev)
		}
		if err == nil && accepted {
			return // settled by handled
		}
		in.mu.Lock()
		list := in.pending[key]
		delete(in.pending, key)
		in.mu.Unlock()
		for _, p := range list {
			if err != nil {
				_ = p.Nak() // this instance is stopping: delivered again elsewhere or later
			} else {
				_ = p.Ack() // the bus handled this id already (it reached this bus before the stream)
			}
		}
	}
}

// handled settles an input once the bus's handler for it returned: on
// success it is acknowledged; on failure it is delivered again after a
// pause (at most maxDeliver times), so an input is never let go unhandled.
func (in *inputs) handled(ev baton.Event, err error) {
	if !in.cfg.IsInput(ev) {
		return // not from the stream: nothing to settle
	}
	key := inputKey(ev)
	in.mu.Lock()
	list := in.pending[key]
	delete(in.pending, key)
	if len(list) > 0 {
		if err == nil {
			delete(in.failed, key)
		} else {
			if len(in.failed) >= maxFailed {
				clear(in.failed)
			}
			in.failed[key] = struct{}{}
		}
	}
	in.mu.Unlock()
	for _, m := range list {
		if err == nil {
			if aerr := m.Ack(); aerr != nil {
				in.br.log.Debug("natsbridge: ack input", "event_id", ev.ID, "err", aerr)
			}
			continue
		}
		in.br.log.Warn("natsbridge: an input's handling failed; it will be delivered again",
			"event_id", ev.ID, "chat_id", ev.ChatID(), "err", err)
		_ = m.NakWithDelay(redeliverDelay)
	}
}

// keepAlive tells JetStream that the inputs being handled here are still
// in progress, so that a long run is not taken for a lost one.
func (in *inputs) keepAlive() {
	in.mu.Lock()
	var all []jetstream.Msg
	for _, list := range in.pending {
		all = append(all, list...)
	}
	in.mu.Unlock()
	for _, m := range all {
		_ = m.InProgress()
	}
}

// nakPending gives back, at shutdown, the inputs taken and not handled, so
// that they are delivered again at once rather than after AckWait.
func (in *inputs) nakPending() {
	in.mu.Lock()
	pending := in.pending
	in.pending = map[string][]jetstream.Msg{}
	in.mu.Unlock()
	for _, list := range pending {
		for _, m := range list {
			_ = m.Nak()
		}
	}
}

// drainLoop, every InactiveAfter/2, makes sure this instance still has its
// consumer and drains the inputs left on the subjects of instances that
// have none any more (they died); every AckWait/3 it tells JetStream that
// the inputs being handled here are in progress.
func (in *inputs) drainLoop() {
	defer in.br.wg.Done()
	drain := time.NewTicker(in.cfg.InactiveAfter / 2)
	defer drain.Stop()
	alive := time.NewTicker(in.cfg.AckWait / 3)
	defer alive.Stop()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-alive.C:
			in.keepAlive()
		case <-drain.C:
			if err := in.ensureConsumer(in.ctx); err != nil && in.ctx.Err() == nil {
				in.br.log.Warn("natsbridge: check this instance's inputs consumer", "err", err)
			}
			if err := in.drainOrphans(in.ctx); err != nil && in.ctx.Err() == nil {
				in.br.log.Warn("natsbridge: drain a dead instance's inputs", "err", err)
			}
		}
	}
}

// drainOrphans drains the subjects of every instance without a consumer.
func (in *inputs) drainOrphans(ctx context.Context) error {
	info, err := in.stream.Info(ctx, jetstream.WithSubjectFilter(in.prefix+">"))
	if err != nil {
		return err
	}
	owners := map[string]bool{}
	for subject := range info.State.Subjects {
		owner, _, ok := strings.Cut(strings.TrimPrefix(subject, in.prefix), ".")
		if ok && owner != subjectToken(in.br.cfg.Instance) {
			owners[owner] = true
		}
	}
	var errs []error
	for owner := range owners {
		if err := in.drainOwner(ctx, owner); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", owner, err))
		}
	}
	return errors.Join(errs...)
}

// drainOwner handles here the inputs on owner's subjects if owner has no
// consumer any more.
func (in *inputs) drainOwner(ctx context.Context, owner string) error {
	cfg := in.consumerConfig(owner)
	if _, err := in.stream.Consumer(ctx, cfg.Durable); err == nil {
		return nil // its instance (or another drainer) consumes it
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	cons, err := in.stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	in.br.log.Info("natsbridge: handling the inputs of an instance that stopped consuming", "instance", in.br.cfg.Instance, "dead", owner)
	deliver := in.deliver(true)
	for ctx.Err() == nil {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			deliver(m)
			n++
		}
		if n == 0 {
			break
		}
	}
	return nil
}

// InputStats returns what input routing did (zero without Config.Inputs).
func (br *Bridge) InputStats() InputStats {
	if br.inputs == nil {
		return InputStats{}
	}
	br.inputs.mu.Lock()
	defer br.inputs.mu.Unlock()
	return br.inputs.stats
}

// stop stops routing and consuming: the consumer drains what the client
// has already pulled into deliver, so nothing taken from the server is
// left unacknowledged and unhandled (nakPending gives back the rest).
func (in *inputs) stop() {
	in.br.cfg.Bus.SetRouter(nil)
	in.mu.Lock()
	cc := in.consume
	in.mu.Unlock()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
		cc.Stop()
	}
	in.cancel()
}

// nameToken makes a string safe as a JetStream stream or consumer name.
func nameToken(s string) string {
	b := []byte(subjectToken(s))
	for i, c := range b {
		if c == '/' || c == '\\' || c == '\t' || c == '\n' || c == '\r' {
			b[i] = '_'
		}
	}
	return string(b)
}
