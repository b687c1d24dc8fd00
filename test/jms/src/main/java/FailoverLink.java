// The connection listener of the qpid-jms failover programs (Failover.java,
// FailoverDedup.java, FailoverFeatureChecks.java): one connection's interruptions and
// restores counted, whether it is down now, and each event written down with the ms
// since the start. The tests read the events: "restored <uri> @<n>ms" names the broker
// the connection failed over to.
//
// test/jms/jvm.ts compiles this class ahead of the programs (Java 17's single-file
// launcher compiles only the program's own file), so another class loader than theirs
// loads it: what they use of it is public.
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import org.apache.qpid.jms.JmsConnectionListener;
import org.apache.qpid.jms.message.JmsInboundMessageDispatch;
import java.net.URI;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

public class FailoverLink implements JmsConnectionListener {
  private static final long T0 = System.nanoTime();
  private static String at() { return " @" + (System.nanoTime() - T0) / 1_000_000 + "ms"; }

  public final AtomicInteger interrupted = new AtomicInteger();
  public final AtomicInteger restored = new AtomicInteger();
  public final List<String> events = Collections.synchronizedList(new ArrayList<>());
  public volatile boolean down;

  public void onConnectionEstablished(URI uri) { events.add("established " + uri + at()); }
  public void onConnectionFailure(Throwable error) { events.add("failed " + error + at()); }
  public void onConnectionInterrupted(URI uri) {
    down = true;
    interrupted.incrementAndGet();
    events.add("interrupted " + uri + at());
  }
  public void onConnectionRestored(URI uri) {
    down = false;
    restored.incrementAndGet();
    events.add("restored " + uri + at());
  }
  public void onInboundMessage(JmsInboundMessageDispatch envelope) {}
  public void onSessionClosed(Session session, Throwable cause) { events.add("session closed " + cause + at()); }
  public void onConsumerClosed(MessageConsumer consumer, Throwable cause) { events.add("consumer closed " + cause + at()); }
  public void onProducerClosed(MessageProducer producer, Throwable cause) { events.add("producer closed " + cause + at()); }
}
