// An independent decoder of __consumer_offsets segments, for tests: the batches are read by
// Kafka's own FileRecords (kafka-clients), the member assignments by Kafka's ConsumerProtocol,
// and the keys and values field by field in the order of Kafka's JSON schemas (OffsetCommitKey,
// OffsetCommitValue v0-v3, GroupMetadataKey, GroupMetadataValue v0-v3: the versions Kafka 3.7
// writes and older ones; flexible v4 is not read here). One line per record, then one line per
// "hash" argument with Java's String.hashCode and the partition of 50 it maps to.
//
// Usage: java -cp kafka-clients.jar ConsumerOffsetsDump.java SEGMENT.log [STRING...]

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;

public class ConsumerOffsetsDump {
    static String str(ByteBuffer b) {
        short n = b.getShort();
        if (n < 0) return "null";
        byte[] raw = new byte[n];
        b.get(raw);
        return new String(raw, StandardCharsets.UTF_8);
    }

    static ByteBuffer bytes(ByteBuffer b) {
        int n = b.getInt();
        ByteBuffer slice = b.slice();
        slice.limit(n);
        b.position(b.position() + n);
        return slice;
    }

    static String offsetValue(ByteBuffer v) {
        short version = v.getShort();
        long offset = v.getLong();
        int epoch = version >= 3 ? v.getInt() : -1;
        String metadata = str(v);
        long commit = v.getLong();
        long expire = version == 1 ? v.getLong() : -1;
        return "value_version=" + version + " offset=" + offset + " leaderEpoch=" + epoch
            + " metadata=" + metadata + " commitTimestamp=" + commit + " expireTimestamp=" + expire;
    }

    static String groupValue(ByteBuffer v) {
        short version = v.getShort();
        StringBuilder out = new StringBuilder("value_version=" + version);
        out.append(" protocolType=").append(str(v));
        out.append(" generation=").append(v.getInt());
        out.append(" protocol=").append(str(v));
        out.append(" leader=").append(str(v));
        out.append(" currentStateTimestamp=").append(version >= 2 ? v.getLong() : -1);
        int members = v.getInt();
        out.append(" members=").append(members);
        for (int i = 0; i < members; i++) {
            out.append("\n  member memberId=").append(str(v));
            out.append(" groupInstanceId=").append(version >= 3 ? str(v) : "null");
            out.append(" clientId=").append(str(v));
            out.append(" clientHost=").append(str(v));
            out.append(" rebalanceTimeout=").append(version >= 1 ? v.getInt() : -1);
            out.append(" sessionTimeout=").append(v.getInt());
            ByteBuffer subscription = bytes(v);
            out.append(" topics=").append(ConsumerProtocol.deserializeSubscription(subscription).topics());
            List<String> assigned = new ArrayList<>();
            for (TopicPartition tp : ConsumerProtocol.deserializeAssignment(bytes(v)).partitions())
                assigned.add(tp.topic() + ":" + tp.partition());
            out.append(" assignment=").append(assigned);
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        try (FileRecords records = FileRecords.open(new File(args[0]))) {
            for (RecordBatch batch : records.batches()) {
                if (batch.isControlBatch()) continue;
                for (Record r : batch) {
                    ByteBuffer k = r.key();
                    short type = k.getShort();
                    String line = "offset=" + r.offset() + " ";
                    if (type == 0 || type == 1) {
                        line += "OffsetCommit key_version=" + type + " group=" + str(k) + " topic="
                            + str(k) + " partition=" + k.getInt() + " "
                            + (r.hasValue() ? offsetValue(r.value()) : "value=null");
                    } else if (type == 2) {
                        line += "GroupMetadata group=" + str(k) + " "
                            + (r.hasValue() ? groupValue(r.value()) : "value=null");
                    } else {
                        line += "unknown record type " + type;
                    }
                    System.out.println(line);
                }
            }
        }
        for (int i = 1; i < args.length; i++) {
            int h = args[i].hashCode();
            System.out.println("hash " + args[i] + " " + h + " " + ((h & 0x7fffffff) % 50));
        }
    }
}
