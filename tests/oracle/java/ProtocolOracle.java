import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor.MemberData;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Utils;

/**
 * Differential oracle for coordinator_audit.core.consumer_protocol: answers one line per request line,
 * using the genuine kafka-clients classes (ConsumerProtocol, StickyAssignor,
 * CooperativeStickyAssignor, Utils.abs + String.hashCode).
 *
 * Tokens are tab-separated. Text encodings (shared with tests/oracle/test_oracle_protocol.py):
 *   string      s<hex of UTF-8>          null: ~
 *   bytes       b<hex>                   null: ~
 *   strings     L: then comma-joined strings
 *   grouped     T: then ';'-joined  s<hex>=p/p/p
 *   flat        P: then ','-joined  s<hex>/p
 *   optional int  the int, or ~ when empty
 * Requests:
 *   SUB_SER version topics(L) userData ownedFlat(P) generation rack   -> OK <hex>
 *   SUB_DE hex                                                        -> OK version=..|topics=..|userData=..|owned=..|gen=..|rack=..
 *   ASG_SER version assignedFlat(P) userData                          -> OK <hex>
 *   ASG_DE hex                                                        -> OK version=..|parts=..|userData=..
 *   STICKY_SER generation partitionsFlat(P)                           -> OK <hex>
 *   STICKY_DE userData                                                -> OK parts=..|gen=..
 *   COOP_SER generation                                               -> OK <hex>
 *   COOP_DE userData                                                  -> OK gen=..
 *   HASH string                                                       -> OK <hashCode> <Utils.abs(hashCode) % 50>
 * Any exception answers ERR <class name>.
 */
public class ProtocolOracle {

    static final class StickyProbe extends StickyAssignor {
        MemberData read(Subscription s) {
            return memberData(s);
        }
    }

    static final class CoopProbe extends CooperativeStickyAssignor {
        MemberData read(Subscription s) {
            return memberData(s);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String answer;
            try {
                answer = "OK " + handle(line.split("\t", -1));
            } catch (Throwable t) {
                answer = "ERR " + t.getClass().getName();
            }
            out.println(answer);
        }
        out.flush();
    }

    static String handle(String[] t) {
        switch (t[0]) {
            case "SUB_SER": {
                Subscription sub = new Subscription(strings(t[2]), bytes(t[3]), flat(t[4]),
                    Integer.parseInt(t[5]), Optional.ofNullable(string(t[6])));
                return hex(ConsumerProtocol.serializeSubscription(sub, Short.parseShort(t[1])));
            }
            case "SUB_DE": {
                ByteBuffer buf = ByteBuffer.wrap(unhex(t[1]));
                short version = ConsumerProtocol.deserializeVersion(buf);
                Subscription s = ConsumerProtocol.deserializeSubscription(buf, version);
                return "version=" + version + "|topics=" + renderStrings(s.topics()) + "|userData=" + renderBytes(s.userData())
                    + "|owned=" + renderFlat(s.ownedPartitions()) + "|gen=" + renderOpt(s.generationId())
                    + "|rack=" + (s.rackId().isPresent() ? renderString(s.rackId().get()) : "~");
            }
            case "ASG_SER": {
                Assignment a = new Assignment(flat(t[2]), bytes(t[3]));
                return hex(ConsumerProtocol.serializeAssignment(a, Short.parseShort(t[1])));
            }
            case "ASG_DE": {
                ByteBuffer buf = ByteBuffer.wrap(unhex(t[1]));
                short version = ConsumerProtocol.deserializeVersion(buf);
                Assignment a = ConsumerProtocol.deserializeAssignment(buf, version);
                return "version=" + version + "|parts=" + renderFlat(a.partitions()) + "|userData=" + renderBytes(a.userData());
            }
            case "STICKY_SER": {
                StickyAssignor a = new StickyAssignor();
                a.onAssignment(new Assignment(flat(t[2])),
                    new ConsumerGroupMetadata("g", Integer.parseInt(t[1]), "m", Optional.empty()));
                return hex(a.subscriptionUserData(Collections.emptySet()));
            }
            case "STICKY_DE": {
                MemberData md = new StickyProbe().read(new Subscription(Collections.emptyList(), bytes(t[1])));
                return "parts=" + renderFlat(md.partitions) + "|gen=" + renderOpt(md.generation);
            }
            case "COOP_SER": {
                CooperativeStickyAssignor a = new CooperativeStickyAssignor();
                a.onAssignment(new Assignment(Collections.emptyList()),
                    new ConsumerGroupMetadata("g", Integer.parseInt(t[1]), "m", Optional.empty()));
                return hex(a.subscriptionUserData(Collections.emptySet()));
            }
            case "COOP_DE": {
                MemberData md = new CoopProbe().read(new Subscription(Collections.emptyList(), bytes(t[1])));
                return "gen=" + renderOpt(md.generation);
            }
            case "HASH": {
                String s = string(t[1]);
                return s.hashCode() + " " + (Utils.abs(s.hashCode()) % 50);
            }
            default:
                throw new IllegalArgumentException("unknown request " + t[0]);
        }
    }

    // ---- decoding request tokens

    static byte[] unhex(String h) {
        byte[] out = new byte[h.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String string(String tok) {
        if (tok.equals("~")) return null;
        if (!tok.startsWith("s")) throw new IllegalArgumentException("not a string token: " + tok);
        return new String(unhex(tok.substring(1)), StandardCharsets.UTF_8);
    }

    static ByteBuffer bytes(String tok) {
        if (tok.equals("~")) return null;
        if (!tok.startsWith("b")) throw new IllegalArgumentException("not a bytes token: " + tok);
        return ByteBuffer.wrap(unhex(tok.substring(1)));
    }

    static List<String> strings(String tok) {
        List<String> out = new ArrayList<>();
        String body = tok.substring(2);
        if (body.isEmpty()) return out;
        for (String s : body.split(",", -1)) out.add(string(s));
        return out;
    }

    static List<TopicPartition> flat(String tok) {
        List<TopicPartition> out = new ArrayList<>();
        String body = tok.substring(2);
        if (body.isEmpty()) return out;
        for (String item : body.split(",", -1)) {
            int slash = item.lastIndexOf('/');
            out.add(new TopicPartition(string(item.substring(0, slash)), Integer.parseInt(item.substring(slash + 1))));
        }
        return out;
    }

    // ---- rendering answers

    static String hex(ByteBuffer buf) {
        ByteBuffer b = buf.duplicate();
        StringBuilder sb = new StringBuilder();
        while (b.hasRemaining()) sb.append(String.format("%02x", b.get() & 0xff));
        return sb.toString();
    }

    static String renderString(String s) {
        return "s" + hex(ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8)));
    }

    static String renderBytes(ByteBuffer b) {
        return b == null ? "~" : "b" + hex(b);
    }

    static String renderStrings(List<String> l) {
        List<String> parts = new ArrayList<>();
        for (String s : l) parts.add(renderString(s));
        return "L:" + String.join(",", parts);
    }

    static String renderFlat(List<TopicPartition> l) {
        List<String> parts = new ArrayList<>();
        for (TopicPartition tp : l) parts.add(renderString(tp.topic()) + "/" + tp.partition());
        return "P:" + String.join(",", parts);
    }

    static String renderOpt(Optional<Integer> o) {
        return o.isPresent() ? String.valueOf(o.get()) : "~";
    }
}
